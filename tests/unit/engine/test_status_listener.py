"""flows/status_listener.py: a reservation reads PAUSED, BUILDING again, REVERTING.

The listener is attached here by hand, next to the conductor's pause listener,
to engines loaded from the flow detail the way a conductor loads them. Each
task reads the reservation row while it runs, so the test sees what the API
would have shown at that moment.
"""

from __future__ import annotations

import threading

import pytest
from taskflow import engines
from taskflow import states as tf_states
from taskflow.patterns import linear_flow
from taskflow.retry import Times

from fleetflow.common import states
from fleetflow.engine import actions
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.pause import PauseOnErrorListener
from fleetflow.flows import registry
from fleetflow.flows.status_listener import ReservationStatusListener
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence.models import Reservation
from fleetflow.plugin import flow_meta

SEEN: list[tuple[str, str, str]] = []  # (event, atom, reservation status then)
FAULTS: set[str] = set()
_state = {"database": None}
_lock = threading.Lock()


def _status(reservation_id):
    with _state["database"].session() as session:
        return session.get(Reservation, reservation_id).status


class Observe(FleetTask):
    """Notes the reservation's status; fails while FAULTS names it. Revert: notes it."""

    def execute(self, reservation_id):
        with _lock:
            SEEN.append(("execute", self.name, _status(reservation_id)))
        if self.name in FAULTS:
            raise RuntimeError(f"{self.name} is broken")

    def revert(self, reservation_id, **kwargs):
        with _lock:
            SEEN.append(("revert", self.name, _status(reservation_id)))


@registry.flow_factory("status-observe")
def observe_flow(count: int, retried: bool = False):
    """count Observe atoms; with ``retried`` the last one sits in a retry subflow."""
    flow = linear_flow.Flow("status-observe")
    for index in range(count - 1 if retried else count):
        flow.add(Observe(name=f"inst-{index:04d}-observe"))
    if retried:
        inner = linear_flow.Flow("retried", retry=Times(2, name="inst-retry"))
        inner.add(Observe(name=f"inst-{count - 1:04d}-observe"))
        flow.add(inner)
    return flow


STEP = [f"inst-{i:04d}-observe" for i in range(3)]


@pytest.fixture
def reservation(database):
    _state["database"] = database
    SEEN.clear()
    FAULTS.clear()
    with database.session() as session:
        session.add(Reservation(id="r-1", tenant_id="t1", status=states.BUILDING))
    yield "r-1"
    FAULTS.clear()


def _status_listener(engine, database):
    """The status listener as the conductor attaches it (paused = the flow detail says so)."""
    return ReservationStatusListener(
        engine, database, paused=lambda: flow_meta.is_paused(engine.storage.flow_meta))


def _run(backend, flow_id, database):
    """Load the flow like a conductor, with the pause and status listeners; run it."""
    detail = backend.get_connection().get_flow_details(flow_id)
    engine = engines.load_from_detail(detail, store=dict(detail.meta["store"]),
                                      backend=backend, engine="serial")
    seen = _state.pop("on_running", None)
    with PauseOnErrorListener(engine), _status_listener(engine, database):
        if seen is not None:  # the status once the listeners saw RUNNING
            engine.notifier.register(
                tf_states.RUNNING, lambda *_a, **_k: seen.append(_status("r-1")))
        try:
            engine.run()
        except Exception:  # noqa: BLE001 - a reverted flow raises; its state says so
            pass
    return engine.storage.get_flow_state()


def _submit(board, backend, **kwargs):
    return submit_mod.submit(board, backend, "status-observe", kwargs,
                             store={"reservation_id": "r-1"}, on_error="pause")


def test_paused_then_building_again_on_resume(board, memory_backend, database, reservation):
    FAULTS.add(STEP[1])
    flow_id = _submit(board, memory_backend, count=3)
    assert _run(memory_backend, flow_id, database) == tf_states.SUSPENDED
    assert _status(reservation) == states.PAUSED

    FAULTS.clear()
    actions.resume(board, memory_backend, flow_id)
    assert _run(memory_backend, flow_id, database) == tf_states.SUCCESS
    # The re-run step saw BUILDING again, not PAUSED.
    assert SEEN[-2:] == [("execute", STEP[1], states.BUILDING),
                         ("execute", STEP[2], states.BUILDING)]


def test_reverting_while_an_operator_revert_runs(board, memory_backend, database,
                                                 reservation):
    FAULTS.add(STEP[1])
    flow_id = _submit(board, memory_backend, count=3)
    _run(memory_backend, flow_id, database)
    actions.revert(board, memory_backend, flow_id)
    statuses = []
    _state["on_running"] = statuses
    assert _run(memory_backend, flow_id, database) == tf_states.REVERTED
    assert statuses == [states.REVERTING]  # never BUILDING on the way
    reverts = [s for s in SEEN if s[0] == "revert"]
    assert reverts == [("revert", STEP[1], states.REVERTING),
                       ("revert", STEP[0], states.REVERTING)]


def test_a_retry_reverting_its_subflow_is_not_a_reservation_revert(
        board, memory_backend, database, reservation):
    FAULTS.add(STEP[2])
    flow_id = submit_mod.submit(board, memory_backend, "status-observe",
                                {"count": 3, "retried": True},
                                store={"reservation_id": "r-1"})
    detail = memory_backend.get_connection().get_flow_details(flow_id)
    engine = engines.load_from_detail(detail, store=dict(detail.meta["store"]),
                                      backend=memory_backend, engine="serial")
    # Repaired after the first failure: the retry's second try works.
    engine.atom_notifier.register(tf_states.REVERTED, lambda *_a, **_k: FAULTS.clear())
    with _status_listener(engine, database):
        engine.run()
    assert engine.storage.get_flow_state() == tf_states.SUCCESS
    assert ("revert", STEP[2], states.BUILDING) in SEEN
    assert _status(reservation) == states.BUILDING


def test_flows_without_a_reservation_are_left_alone(board, memory_backend, database,
                                                    reservation):
    FAULTS.add(STEP[0])
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear",
                                {"count": 1, "fail_at": 0}, on_error="pause")
    detail = memory_backend.get_connection().get_flow_details(flow_id)
    engine = engines.load_from_detail(detail, store={**detail.meta["store"],
                                                     "fence": {"token": 1}},
                                      backend=memory_backend, engine="serial")
    with PauseOnErrorListener(engine), _status_listener(engine, database):
        engine.run()
    assert engine.storage.get_flow_state() == tf_states.SUSPENDED
    assert _status(reservation) == states.BUILDING
