"""oslo.policy's rule evaluation with the check classes' arity kept (api/policy_checks.py).

The same answers as oslo.policy's own evaluation for every rule fleetflow
registers, a check written either way still called as it asks, and the
signature asked once per class rather than at every evaluation.
"""

from __future__ import annotations

import pytest
from oslo_context import context as oslo_context
from oslo_policy import _checks

from fleetflow.api import policy, policy_checks
from fleetflow.common import config

CALLERS = {
    "admin": oslo_context.RequestContext(project_id="admin", roles=["admin", "member",
                                                                    "reader"]),
    "member": oslo_context.RequestContext(project_id="p1", roles=["member", "reader"]),
    "reader": oslo_context.RequestContext(project_id="p1", roles=["reader"]),
    "stranger": oslo_context.RequestContext(project_id="p2", roles=["member"]),
}


@pytest.fixture
def enforcer(tmp_path):
    conf = config.load(args=[], environ={})
    conf.set_override("policy_file", str(tmp_path / "policy.yaml"), group="api")
    made = policy.make_enforcer(conf)
    yield made
    policy_checks.install()


def _answers(enforcer) -> dict:
    return {(rule.name, who): enforcer.enforce(rule.name, {"project_id": "p1"}, creds)
            for rule in policy.list_rules() for who, creds in CALLERS.items()}


def test_every_rule_answers_as_oslo_policy_answers_it(enforcer):
    policy_checks.install()
    ours = _answers(enforcer)
    policy_checks.uninstall()
    theirs = _answers(enforcer)
    assert ours == theirs
    assert any(ours.values()) and not all(ours.values())


class CurrentRuleCheck(_checks.Check):
    def __call__(self, target, creds, enforcer, current_rule=None):
        return current_rule == self.match


class LegacyCheck(_checks.Check):
    def __call__(self, target, creds, enforcer):
        return self.match == "yes"


def test_checks_of_either_signature_are_called_as_they_ask(enforcer):
    policy_checks.install()
    assert enforcer.enforce("named", {}, {}) is False  # unknown rule, default rule
    enforcer.rules["named"] = CurrentRuleCheck("rule_is", "named")
    enforcer.rules["legacy"] = LegacyCheck("legacy", "yes")
    enforcer.rules["legacy-no"] = LegacyCheck("legacy", "no")
    assert enforcer.enforce("named", {}, {}) is True
    assert enforcer.enforce("legacy", {}, {}) is True
    assert enforcer.enforce("legacy-no", {}, {}) is False
    enforcer.rules["both"] = _checks.AndCheck([CurrentRuleCheck("rule_is", "both"),
                                               LegacyCheck("legacy", "yes")])
    assert enforcer.enforce("both", {}, {}) is True


def test_a_check_class_is_inspected_once(enforcer, monkeypatch):
    policy_checks.install()
    policy_checks._takes_rule.clear()
    asked = []
    real = policy_checks.inspect.getfullargspec

    def counting(function):
        asked.append(function)
        return real(function)
    monkeypatch.setattr(policy_checks.inspect, "getfullargspec", counting)
    for _ in range(20):
        _answers(enforcer)
    kinds = {type(rule) for rule in _walk(enforcer.rules.values())}
    assert 0 < len(asked) <= len(kinds)


def _walk(rules):
    for rule in rules:
        yield rule
        yield from _walk(getattr(rule, "rules", ()) or ([rule.rule] if hasattr(rule, "rule")
                                                        else []))
