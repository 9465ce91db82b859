"""FLEETFLOW_CRASH_AT parsing (common/crash_points.py) and where each point fires.

``os.kill`` is replaced by a recorder here (the real SIGKILL is exercised by
tests/reliability); everything else is the real engine on the memory backend.
"""

from __future__ import annotations

import signal

import pytest
import taskflow.engines
from taskflow.patterns import linear_flow

from fleetflow.common import crash_points
from fleetflow.flows.tasks import base


class Effect(base.FleetTask):
    """Appends to a journal. Revert: appends to it too."""

    def __init__(self, name, journal, fail=False):
        super().__init__(name=name)
        self.journal = journal
        self.fail = fail

    def execute(self):
        self.journal.append(("execute", self.name))
        if self.fail:
            raise RuntimeError("boom")

    def revert(self, **kwargs):
        self.journal.append(("revert", self.name))


@pytest.fixture
def kills(monkeypatch):
    """Journal shared with the tasks; a kill appends ("kill", signal)."""
    journal = []
    monkeypatch.setattr(crash_points.os, "kill",
                        lambda pid, sig: journal.append(("kill", sig)))
    return journal


def _run(journal, fail_last=False):
    flow = linear_flow.Flow("f").add(Effect("a", journal),
                                     Effect("b", journal, fail=fail_last))
    engine = taskflow.engines.load(flow)
    with base.CrashPointListener(engine):
        try:
            engine.run()
        except RuntimeError:
            pass


def test_targets_are_parsed_and_checked():
    env = {crash_points.CRASH_ENV: "inst-0001-boot:after-effect, a:before-execute"}
    assert crash_points.crash_targets(env) == {("inst-0001-boot", "after-effect"),
                                       ("a", "before-execute")}
    assert crash_points.crash_targets({}) == set()
    with pytest.raises(ValueError):
        crash_points.crash_targets({crash_points.CRASH_ENV: "a:sometime"})
    with pytest.raises(ValueError):
        crash_points.crash_targets({crash_points.CRASH_ENV: "no-point"})


@pytest.mark.parametrize(("target", "before"), [
    ("a:before-execute", []),
    ("a:after-effect", [("execute", "a")]),
    ("b:before-execute", [("execute", "a")]),
])
def test_execute_points_fire_around_the_execute(kills, monkeypatch, target, before):
    monkeypatch.setenv(crash_points.CRASH_ENV, target)
    _run(kills)
    first_kill = kills.index(("kill", signal.SIGKILL))
    assert kills[:first_kill] == before


def test_after_checkpoint_fires_once_the_success_is_saved(kills, monkeypatch):
    monkeypatch.setenv(crash_points.CRASH_ENV, "a:after-checkpoint")
    _run(kills)
    # After a's execute, before b's: the listener saw a's SUCCESS notification.
    assert kills[:2] == [("execute", "a"), ("kill", signal.SIGKILL)]


def test_during_revert_fires_after_the_revert_body(kills, monkeypatch):
    monkeypatch.setenv(crash_points.CRASH_ENV, "a:during-revert")
    _run(kills, fail_last=True)
    assert kills.count(("kill", signal.SIGKILL)) == 1
    assert kills[kills.index(("kill", signal.SIGKILL)) - 1] == ("revert", "a")


def test_nothing_fires_without_the_variable(kills, monkeypatch):
    monkeypatch.delenv(crash_points.CRASH_ENV, raising=False)
    _run(kills, fail_last=True)
    assert ("kill", signal.SIGKILL) not in kills
    assert ("revert", "a") in kills
