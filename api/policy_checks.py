"""oslo.policy's rule evaluation without a signature inspection at every step.

``oslo_policy._checks._check`` evaluates one node of a rule (``role:admin``,
``project_id:%(project_id)s``, an ``or`` of them ...) and, to know whether the
node's ``__call__`` takes the rule's name as a fifth argument, asks
``inspect.getfullargspec`` each time. A request's two checks walk about nine
nodes: those inspections were half of the policy's cost and a tenth of a
reservation's summary GET, the request that clients poll.

:func:`install` replaces it with the same evaluation, the answer to that
question kept per check class (a class's ``__call__`` does not change). The
shape an upstream fix would take; oslo.policy's own checks and any custom
check registered with it go through it alike.
"""

from __future__ import annotations

import inspect

from oslo_policy import _checks

_takes_rule: dict[type, bool] = {}


def _check(rule, target, creds, enforcer, current_rule):
    kind = type(rule)
    takes_rule = _takes_rule.get(kind)
    if takes_rule is None or "__call__" in getattr(rule, "__dict__", ()):
        takes_rule = len(inspect.getfullargspec(rule.__call__).args) > 4
        if "__call__" not in getattr(rule, "__dict__", ()):
            _takes_rule[kind] = takes_rule
    if takes_rule:
        return rule(target, creds, enforcer, current_rule)
    return rule(target, creds, enforcer)  # a check written before the rule's name was passed


_check.__doc__ = _checks._check.__doc__
_original = _checks._check


def install() -> None:
    """Use :func:`_check` in oslo.policy (once; later calls change nothing)."""
    _checks._check = _check


def uninstall() -> None:
    """oslo.policy's own evaluation back (for tests that compare the two)."""
    _checks._check = _original
