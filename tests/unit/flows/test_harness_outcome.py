"""The public harness reports how a flow ended, and raises what is not the flow's doing.

Written as a user of ``fleetflow.testing`` writes a flow test: the flow's module
imports what it needs from ``fleetflow.testing`` alone.
"""

from __future__ import annotations

import threading

import pytest
from taskflow import exceptions as tf_exc
from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.common.exceptions import InvalidInput
from fleetflow.testing import FleetTask, Outcome, flow_factory

RAN: list[str] = []


class Step(FleetTask):
    def execute(self, fail_at):
        RAN.append(self.name)
        if self.name == fail_at:
            raise RuntimeError(f"{self.name} broke")


class NeedsSomething(FleetTask):
    def execute(self, something):
        RAN.append(self.name)


@flow_factory("harness-outcome-steps")
def steps_flow(count: int, fail_at: str = ""):
    return linear_flow.Flow("steps").add(
        *(Step(f"step-{i}", inject={"fail_at": fail_at}) for i in range(count)))


class BadUndo(FleetTask):
    def execute(self):
        RAN.append(self.name)

    def revert(self, **kwargs):
        raise ValueError(f"{self.name} cannot be undone")


class Together(FleetTask):
    """Fails once its partner runs too: both fail, side by side."""

    meeting = threading.Barrier(2, timeout=30)

    def execute(self):
        self.meeting.wait()
        raise RuntimeError(f"{self.name} broke")


@flow_factory("harness-outcome-pair")
def pair_flow():
    # The engine raises the two failures together (a WrappedFailure).
    return unordered_flow.Flow("pair").add(Together("left"), Together("right"))


@flow_factory("harness-outcome-stuck")
def stuck_flow():
    return linear_flow.Flow("stuck").add(BadUndo("undo-fails"),
                                         Step("breaks", inject={"fail_at": "breaks"}))


@flow_factory("harness-outcome-needy")
def needy_flow():
    return linear_flow.Flow("needy").add(NeedsSomething("needy"))


@pytest.fixture(autouse=True)
def _fresh_log():
    RAN.clear()


def steps(count=3, **kwargs):
    return {"flow": "harness-outcome-steps", "kwargs": {"count": count, **kwargs}}


def test_a_success_reads_as_its_state_and_has_no_failures(fleetflow_cloud):
    outcome = fleetflow_cloud.run(steps())
    assert outcome == "SUCCESS" and "SUCCESS" == outcome
    assert isinstance(outcome, Outcome) and str(outcome) == outcome.state == "SUCCESS"
    assert outcome.failures == {} and outcome.revert_failures == {}
    assert RAN == ["step-0", "step-1", "step-2"]


def test_a_failed_atom_comes_back_with_its_exception_and_traceback(fleetflow_cloud):
    outcome = fleetflow_cloud.run(steps(fail_at="step-1"))
    assert outcome == "REVERTED"
    assert list(outcome.failures) == ["step-1"]
    failure = outcome.failures["step-1"]
    assert failure.check(RuntimeError)
    assert failure.exception_str == "step-1 broke"
    assert "raise RuntimeError" in failure.traceback_str
    # What pytest prints when `assert outcome == "SUCCESS"` fails.
    assert "step-1 broke" in repr(outcome)
    assert RAN == ["step-0", "step-1"]


def test_failures_side_by_side_are_all_reported(fleetflow_cloud):
    outcome = fleetflow_cloud.run({"flow": "harness-outcome-pair", "kwargs": {}})
    assert outcome == "REVERTED"
    assert sorted(outcome.failures) == ["left", "right"]


def test_a_failed_revert_is_a_failure_with_both_failures(fleetflow_cloud):
    outcome = fleetflow_cloud.run({"flow": "harness-outcome-stuck", "kwargs": {}})
    assert outcome == "FAILURE"
    assert list(outcome.failures) == ["breaks"]
    assert list(outcome.revert_failures) == ["undo-fails"]
    assert outcome.revert_failures["undo-fails"].check(ValueError)


def test_a_flow_built_by_hand_reports_the_same(fleetflow_cloud):
    outcome = fleetflow_cloud.run_flow(steps_flow(2, fail_at="step-0"))
    assert outcome == "REVERTED" and list(outcome.failures) == ["step-0"]


def test_a_missing_requirement_is_raised_not_reverted(fleetflow_cloud):
    with pytest.raises(tf_exc.MissingDependencies):
        fleetflow_cloud.run({"flow": "harness-outcome-needy", "kwargs": {}})
    assert RAN == []
    # Given it, the same flow runs.
    job = {"flow": "harness-outcome-needy", "kwargs": {}, "store": {"something": 1}}
    assert fleetflow_cloud.run(job) == "SUCCESS"


def test_an_unknown_flow_name_is_raised(fleetflow_cloud):
    with pytest.raises(InvalidInput, match="no-such-flow"):
        fleetflow_cloud.run({"flow": "no-such-flow", "kwargs": {}})


def test_a_failure_only_storage_still_caches_is_the_flows_own():
    # A retried boot that failed on one host and again on another, the second
    # time once the flow had begun to revert: the flow detail holds the second
    # failure, storage's cache still holds the first (under execute) beside
    # it, and the engine raises both.
    from types import SimpleNamespace

    from taskflow.types import failure as tf_failure

    from fleetflow.testing import outcome

    def failed(message):
        try:
            raise RuntimeError(message)
        except RuntimeError:
            return tf_failure.Failure()

    first, second = failed("boot on h01"), failed("boot on h02")
    atoms = [SimpleNamespace(name="boot", failure=second, revert_failure=None)]
    storage = SimpleNamespace(
        get_flow_state=lambda: "REVERTED",
        get_execute_result=lambda name: second,
        get_execute_failures=lambda: {"boot": first},
        get_revert_failures=lambda: {"boot": second})

    class Detail(list):
        uuid = "flow-1"

    raised = tf_exc.WrappedFailure([first, second])
    got = outcome.of_failed(storage, Detail(atoms), raised)
    assert got == "REVERTED" and got.failures == {"boot": second}
    # A failure neither the detail nor the cache holds is not the flow's.
    assert outcome.of_failed(storage, Detail(atoms), RuntimeError("harness bug")) is None
