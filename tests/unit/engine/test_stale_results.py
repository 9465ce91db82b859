"""A task interrupted while RUNNING its second try is reverted with no result, not the first's.

A retry resets its chain's atoms to PENDING for the next try, and TaskFlow's
reset keeps each atom's result of the try before. When a process dies while
such an atom is RUNNING again, after a revert of the whole flow was decided
(another branch failed), the conductor that resumes reverts it at once: its
revert must not be handed the earlier try's result, which names where the
*earlier* try acted (a claim released on the wrong host leaks the new one).

The fleetflow engine starts every try clean (plugin/runtime.py). TaskFlow's
stock engine does not: that case documents it — if TaskFlow fixes it, the
expectation changes — and fleetflow's tasks do not trust such a result
(tests/unit/flows/test_stale_try_revert.py).

The "crash" is a copy of the logbook taken while the atom is RUNNING with
the intention REVERT, which is what the database holds when a conductor is
killed there (every engine here has stored it by then); the copy is resumed
by a new engine in a new backend.
"""

from __future__ import annotations

import copy
import threading
import time

import pytest
from taskflow import retry as tf_retry
from taskflow import states as tf_states
from taskflow.patterns import linear_flow, unordered_flow
from taskflow.persistence import backends as tf_backends
from taskflow.persistence import models as tf_models

from fleetflow.engine.engines import make_engine
from fleetflow.flows.tasks.base import FleetTask

HOSTS = ["host-a", "host-b"]


class Gates:
    def __init__(self):
        self.second_claim_started = threading.Event()
        self.release = threading.Event()
        self.reverted_with: list = []


GATES = Gates()


class Claim(FleetTask):
    """Its second try (on host-b) waits until the test lets it go."""

    def execute(self, host):
        if host == HOSTS[1]:
            GATES.second_claim_started.set()
            GATES.release.wait(10)
        return {"host": host}

    def revert(self, result, **kwargs):
        GATES.reverted_with.append(result)


class Boot(FleetTask):
    """Fails on the first host, so the chain's retry tries the next."""

    def execute(self, host):
        if host == HOSTS[0]:
            raise RuntimeError(f"no room on {host}")
        return host

    def revert(self, **kwargs):
        return None


class Other(FleetTask):
    """Another branch: fails once the claim's second try runs, reverting the flow."""

    def execute(self):
        assert GATES.second_claim_started.wait(10)
        raise RuntimeError("another instance found no host")

    def revert(self, **kwargs):
        return None


def make_flow():
    chain = linear_flow.Flow("chain", retry=tf_retry.ForEach(HOSTS, name="chain-retry",
                                                              provides="host"))
    chain.add(Claim("chain-claim"), Boot("chain-boot"))
    other = linear_flow.Flow("other").add(Other("other-fail"))
    return linear_flow.Flow("flow").add(unordered_flow.Flow("branches").add(chain, other))


def saved_flow(backend, flow_detail=None):
    book = tf_models.LogBook("book")
    flow_detail = flow_detail or tf_models.FlowDetail("flow", uuid="flow-1")
    book.add(flow_detail)
    backend.get_connection().save_logbook(book)
    return flow_detail


def claim_detail(backend):
    flow_detail = backend.get_connection().get_flow_details("flow-1")
    return flow_detail, next((a for a in flow_detail if a.name == "chain-claim"), None)


@pytest.mark.parametrize("engine, handed", [
    ("fleetflow-parallel", None),
    ("parallel", {"host": HOSTS[0]}),  # stock: the earlier try's result
])
def test_a_revert_after_a_crash_mid_try_gets_no_result_of_the_try_before(engine, handed):
    global GATES
    GATES = Gates()
    backend = tf_backends.fetch({"connection": "memory://"})
    first = make_engine(make_flow(), saved_flow(backend), backend, engine=engine, workers=4)
    outcome: list = []

    def run_first():
        try:
            first.run()
        except Exception as exc:  # noqa: BLE001 - checked below
            outcome.append(exc)

    runner = threading.Thread(target=run_first)
    runner.start()
    snapshot = None
    deadline = time.monotonic() + 10
    while snapshot is None and time.monotonic() < deadline:
        flow_detail, claim = claim_detail(backend)
        if claim is not None and (claim.state, claim.intention) == (tf_states.RUNNING,
                                                                   tf_states.REVERT):
            snapshot = copy.deepcopy(flow_detail)
        time.sleep(0.005)
    GATES.release.set()
    runner.join(10)
    assert snapshot is not None, "the claim's second try was never RUNNING under a revert"
    assert "another instance found no host" in str(outcome[0])
    # The first run reverted the claim it saw finish, with that try's result.
    assert GATES.reverted_with[-1] == {"host": HOSTS[1]}

    GATES.reverted_with.clear()
    crashed = tf_backends.fetch({"connection": "memory://"})
    resumed = make_engine(make_flow(), saved_flow(crashed, snapshot), crashed,
                          engine=engine, workers=4)
    with pytest.raises(Exception, match="another instance found no host"):
        resumed.run()
    # The interrupted try's outcome is unknown: no result, never host-a's.
    assert GATES.reverted_with == [handed]
