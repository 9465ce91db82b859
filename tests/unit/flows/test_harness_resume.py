"""A flow stopped half way by a crash point is resumed in the test's process.

Written as a user of ``fleetflow.testing`` writes it: the flow's atoms that had
finished before the stop do not run again; the one the stop caught runs again
or not, as after a real crash at that point.
"""

from __future__ import annotations

import pytest
from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.testing import FleetTask, flow_factory

RAN: list[str] = []
REVERTED: list[str] = []


class Step(FleetTask):
    def execute(self, fail_at):
        RAN.append(self.name)
        if self.name == fail_at:
            raise RuntimeError(f"{self.name} broke")

    def revert(self, **kwargs):
        REVERTED.append(self.name)


@flow_factory("harness-resume-steps")
def steps_flow(fail_at: str = ""):
    def step(name):
        return Step(name, inject={"fail_at": fail_at})

    return linear_flow.Flow("steps").add(
        step("first"), unordered_flow.Flow("both").add(step("left"), step("right")),
        step("last"))


@pytest.fixture(autouse=True)
def _fresh_logs():
    RAN.clear()
    REVERTED.clear()


def job(**kwargs):
    return {"flow": "harness-resume-steps", "kwargs": kwargs}


@pytest.mark.parametrize(("point", "again"), [("before-execute", []),
                                              ("after-effect", ["first"]),
                                              ("after-checkpoint", [])])
def test_a_stopped_flow_finishes_on_resume_without_redoing_what_was_saved(
        fleetflow_cloud, fleetflow_crash_points, point, again):
    fleetflow_crash_points.arm("first", point, stop=True)
    stopped = fleetflow_cloud.run(job())
    assert stopped == "RUNNING"
    assert fleetflow_crash_points.reached == [("first", point)]
    ran_before = list(RAN)
    assert ran_before == ([] if point == "before-execute" else ["first"])

    RAN.clear()
    resumed = fleetflow_cloud.resume(stopped)
    assert resumed == "SUCCESS" and resumed.flow_id == stopped.flow_id
    # Saved SUCCESS: not run again; an effect whose result was not saved: run again.
    expected_first = ["first"] if point == "before-execute" else again
    assert RAN[:len(expected_first)] == expected_first
    assert sorted(RAN[len(expected_first):]) == ["last", "left", "right"]
    assert fleetflow_crash_points.reached == [("first", point)]  # disarmed by the stop


def test_a_revert_stopped_half_way_is_finished_on_resume(fleetflow_cloud,
                                                          fleetflow_crash_points):
    fleetflow_crash_points.arm("first", "during-revert", stop=True)
    stopped = fleetflow_cloud.run(job(fail_at="last"))
    assert stopped.state not in ("REVERTED", "SUCCESS")
    assert REVERTED.count("first") == 1
    resumed = fleetflow_cloud.resume(stopped)
    assert resumed == "REVERTED" and list(resumed.failures) == ["last"]
    assert REVERTED.count("first") == 2  # its undo was not saved: done again
    assert RAN.count("first") == 1


def test_a_posted_job_is_resumed_by_its_flow_id(fleetflow_cloud, fleetflow_crash_points):
    fleetflow_crash_points.arm("left", "before-execute", stop=True)
    posted = {**job(), "flow_id": "harness-resume-1"}
    assert fleetflow_cloud.run(posted).flow_id == "harness-resume-1"
    assert fleetflow_cloud.resume(posted) == "SUCCESS"
    assert RAN.count("first") == 1 and RAN.count("left") == 1


def test_a_flow_built_by_hand_is_resumed_too(fleetflow_cloud, fleetflow_crash_points):
    fleetflow_crash_points.arm("last", "before-execute", stop=True)
    stopped = fleetflow_cloud.run_flow(steps_flow())
    assert stopped == "RUNNING" and sorted(RAN) == ["first", "left", "right"]
    assert fleetflow_cloud.resume(stopped) == "SUCCESS"
    assert sorted(RAN) == ["first", "last", "left", "right"]
