"""What fleetflow keeps in a flow detail's ``meta``, and the flow states it reads.

fleetflow's own options live under one key, :data:`META_KEY`, of a flow
detail's ``meta`` (TaskFlow's own entries sit beside it). The submitter writes
them (``engine/submit.py``); operators' actions change ``paused`` and
``on_error`` (``engine/actions.py``); conductors, the reconciler, the audit and
the status listener read them. The fields:

- ``flow_name``, ``owner_tenant``, ``submitted_at``: who asked for what, when;
- ``on_error``: :data:`ON_ERROR_REVERT` (roll back on a failure) or
  :data:`ON_ERROR_PAUSE` (stop and wait for an operator);
- ``board``: the jobboard whose reconciler posts the flow again if its job is lost;
- ``paused``, ``paused_at``: set while a flow waits for an operator.
"""

from __future__ import annotations

from taskflow import states as tf_states

#: Key of fleetflow's own options inside a flow detail's ``meta``.
META_KEY = "fleetflow"

ON_ERROR_REVERT = "revert"
ON_ERROR_PAUSE = "pause"
ON_ERROR_CHOICES = (ON_ERROR_REVERT, ON_ERROR_PAUSE)

#: Flow states a conductor never runs again on its own.
SETTLED_FLOW_STATES = frozenset({tf_states.SUCCESS, tf_states.REVERTED, tf_states.FAILURE})


def options(meta: dict | None) -> dict:
    """A copy of fleetflow's options in a flow detail's ``meta`` (empty when absent)."""
    return dict((meta or {}).get(META_KEY) or {})


def is_paused(meta: dict | None) -> bool:
    """True while the flow whose ``meta`` this is waits for an operator."""
    return bool(options(meta).get("paused"))


def with_options(meta: dict | None, options: dict) -> dict:
    """A copy of a flow detail's ``meta`` whose fleetflow options are ``options``."""
    return {**(meta or {}), META_KEY: options}
