"""Database outages met by running flows: waited out, or the job left for a resume.

The toy task below meets a "lost connection" (SQLAlchemy's OperationalError
with ``connection_invalidated``) while the outage lasts, before its effect;
the logbook's checkpoints can be made to meet one too. Conductors run the
flows as in production, on fleetflow's engine (fleetflow-parallel), whose
checkpoint buffer withholds outcomes an outage caused (docs/engine.md).
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import sqlalchemy as sa
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow.patterns import linear_flow

from fleetflow.common import states
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.pool import ConductorPool
from fleetflow.engine.conductor.worker import make_conductor
from fleetflow.engine.jobboard.boards import make_jobboard
from fleetflow.flows import keys, registry, runtime
from fleetflow.flows.status_listener import ReservationStatusListener
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence.logbook.backend import LogbookBackend
from fleetflow.persistence.models import Reservation

from .conftest import record


def disconnect():
    return sa.exc.OperationalError(
        "UPDATE instances", None, Exception("server closed the connection unexpectedly"),
        connection_invalidated=True)


class _Outage:
    """``failures`` more attempts fail, or every attempt while ``down`` is set.

    ``on_attempt`` (if set) is called first: a test's hook into a running flow.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.failures = 0
        self.down = threading.Event()
        self.on_attempt = None

    def hit(self) -> None:
        if self.on_attempt is not None:
            self.on_attempt()
        with self.lock:
            failing = self.down.is_set() or self.failures > 0
            self.failures = max(0, self.failures - 1)
        if failing:
            raise disconnect()


OUTAGE = _Outage()


class Write(FleetTask):
    """Writes its row; the write meets the outage, if any. Revert: records it."""

    def execute(self, fence, flow_id):
        record("attempt", self.name)
        OUTAGE.hit()
        record("execute", self.name, fence["token"])
        return self.name

    def revert(self, *args, **kwargs):
        record("revert", self.name)


@registry.flow_factory("toy-outage")
def toy_outage(count: int):
    """count Write atoms in a line."""
    flow = linear_flow.Flow("toy-outage")
    for index in range(count):
        flow.add(Write(f"inst-{index:04d}-write"))
    return flow


@pytest.fixture
def outage_conf(make_conf):
    return make_conf(jobboard={"claim_expiry": 2, "keepalive_interval": 0.3},
                     conductor={"engine_workers": 4},
                     database={"max_retry_seconds": 10.0, "retry_interval": 0.01})


@pytest.fixture
def outage_db(outage_conf):
    from fleetflow.persistence.db import get_database

    database = get_database(outage_conf)
    database.upgrade()
    rt = runtime.install(runtime.Runtime(outage_conf, database, None, None))
    yield database
    assert runtime.get() is rt
    runtime.uninstall()
    with OUTAGE.lock:
        OUTAGE.failures = 0
        OUTAGE.down.clear()
        OUTAGE.on_attempt = None


@pytest.fixture
def outage_board(outage_conf, outage_db, memory_backend):
    board = make_jobboard(outage_conf, memory_backend)
    yield board
    board.close()


def _wait(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def _state(backend, flow_id) -> str:
    return submit_mod.load_status(backend, flow_id)["state"]


def test_a_task_that_meets_a_disconnect_is_run_again_and_the_flow_succeeds(
        outage_conf, outage_board, memory_backend, effects_log):
    OUTAGE.failures = 3
    flow_id = submit_mod.submit(outage_board, memory_backend, "toy-outage", {"count": 3})
    with ConductorPool(outage_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        _wait(lambda: _state(memory_backend, flow_id) == tf_states.SUCCESS)
        _wait(lambda: outage_board.job_count == 0)  # consumed
    assert sorted(a for _, a, _ in effects_log("execute")) == [
        "inst-0000-write", "inst-0001-write", "inst-0002-write"]  # one effect each
    assert len(effects_log("attempt")) == 3 + 3
    assert effects_log("revert") == []


def test_checkpoints_that_meet_a_disconnect_are_stored_once_it_is_over(
        outage_conf, outage_db, effects_log):
    backend = LogbookBackend({}, engine=outage_db.engine)
    board = make_jobboard(outage_conf, backend)
    real = backend._checkpoint.many
    calls = {"n": 0, "failed": 0}

    def flaky_many(rows):
        calls["n"] += 1
        if calls["failed"] < 4 and calls["n"] % 2:
            calls["failed"] += 1
            raise disconnect()
        return real(rows)

    backend._checkpoint.many = flaky_many
    try:
        flow_id = submit_mod.submit(board, backend, "toy-outage", {"count": 4})
        with ConductorPool(outage_conf, workers=1, persistence=backend, wait_timeout=0.05):
            _wait(lambda: _state(backend, flow_id) == tf_states.SUCCESS)
            _wait(lambda: board.job_count == 0)
    finally:
        board.close()
    assert calls["failed"] == 4
    status = submit_mod.load_status(backend, flow_id)
    assert [a["state"] for a in status["atoms"]] == [tf_states.SUCCESS] * 4
    assert len(effects_log("execute")) == 4 and effects_log("revert") == []


def _dispatch_once(conf, backend, name) -> str:
    """One conductor runs one job and stops; how it ended: consumed, abandoned, trashed."""
    conductor = make_conductor(conf, name, persistence=backend, wait_timeout=0.05)
    ended = []

    def finished(event, details):
        ended.append(event)
        conductor.stop()

    for event in ("job_consumed", "job_abandoned", "job_trashed"):
        conductor.notifier.register(event, finished)
    runner = threading.Thread(target=conductor.run)
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "the conductor never finished its job"
    with contextlib.suppress(Exception):
        conductor.close()
    return ended[0]


def test_after_the_window_the_flow_stops_unreverted_and_its_job_is_not_consumed(
        make_conf, outage_board, memory_backend, effects_log):
    short = make_conf(jobboard={"claim_expiry": 2, "keepalive_interval": 0.3},
                      database={"max_retry_seconds": 0.3, "retry_interval": 0.02})
    runtime.get().conf = short
    runtime.get().database.retry_policy.max_seconds = 0.3
    flow_id = submit_mod.submit(outage_board, memory_backend, "toy-outage", {"count": 3})
    OUTAGE.failures = 0
    with OUTAGE.lock:
        OUTAGE.down.set()
    started = time.monotonic()
    assert _dispatch_once(short, memory_backend, "first") == "job_abandoned"
    assert time.monotonic() - started < 30

    status = submit_mod.load_status(memory_backend, flow_id)
    # Not FAILURE, not reverted: the flow waits for a resume where it stopped.
    assert status["state"] == tf_states.RUNNING
    atoms = {a["name"]: a for a in status["atoms"]}
    assert atoms["inst-0000-write"]["state"] == tf_states.RUNNING
    assert atoms["inst-0000-write"]["failure"] is None
    assert effects_log("revert") == [] and effects_log("execute") == []
    assert len(effects_log("attempt")) > 2  # retried within the window
    runs = len(effects_log("attempt"))
    assert outage_board.job_count == 1  # abandoned, not consumed
    [job] = list(outage_board.iterjobs(only_unclaimed=True))
    assert job.name == flow_id

    # The database is back: the next conductor resumes the flow to its end.
    OUTAGE.down.clear()
    assert _dispatch_once(short, memory_backend, "second") == "job_consumed"
    assert _state(memory_backend, flow_id) == tf_states.SUCCESS
    assert sorted(a for _, a, _ in effects_log("execute")) == [
        "inst-0000-write", "inst-0001-write", "inst-0002-write"]
    assert len(effects_log("attempt")) == runs + 3
    assert effects_log("revert") == []
    assert outage_board.job_count == 0


def test_checkpoints_lost_for_the_whole_window_leave_the_flow_to_a_resume(
        make_conf, outage_db, effects_log):
    short = make_conf(jobboard={"claim_expiry": 2, "keepalive_interval": 0.3},
                      database={"max_retry_seconds": 0.3, "retry_interval": 0.02})
    outage_db.retry_policy.max_seconds = 0.3
    backend = LogbookBackend({}, engine=outage_db.engine)
    board = make_jobboard(short, backend)
    real, down = backend._checkpoint.many, threading.Event()

    def many(rows):
        if down.is_set():
            raise disconnect()
        return real(rows)

    backend._checkpoint.many = many
    try:
        flow_id = submit_mod.submit(board, backend, "toy-outage", {"count": 3})
        OUTAGE.on_attempt = down.set  # the database goes once the flow runs
        assert _dispatch_once(short, backend, "first") == "job_abandoned"
        OUTAGE.on_attempt = None
        # The engine failed storing checkpoints; its flow is not marked FAILURE
        # (which would make it look finished to the next conductor).
        assert _state(backend, flow_id) == tf_states.RUNNING
        assert effects_log("revert") == []
        assert board.job_count == 1
        down.clear()
        assert _dispatch_once(short, backend, "second") == "job_consumed"
        assert _state(backend, flow_id) == tf_states.SUCCESS
        assert effects_log("revert") == []
        assert board.job_count == 0
    finally:
        board.close()


def test_without_a_runtime_a_task_is_not_retried():
    runtime.uninstall()
    task = Write("alone")
    OUTAGE.failures = 1
    try:
        with pytest.raises(sa.exc.OperationalError):
            task.execute(fence={"token": 1}, flow_id="f")
    finally:
        OUTAGE.failures = 0


class _Storage:
    @staticmethod
    def fetch(key):
        if key == keys.RESERVATION_ID:
            return "r-1"
        raise tf_exc.NotFound(key)


class _Engine:
    storage = _Storage()


def test_a_status_write_waits_out_a_disconnect(outage_db):
    with outage_db.session() as session:
        session.add(Reservation(id="r-1", tenant_id="t1", status=states.BUILDING))
    real, calls = outage_db.session, []

    def session():
        calls.append(1)
        if len(calls) <= 2:
            raise disconnect()
        return real()

    outage_db.session = session
    try:
        ReservationStatusListener(_Engine(), outage_db, paused=lambda: True)._write(
            states.PAUSED)
    finally:
        del outage_db.session
    assert len(calls) == 3
    with outage_db.session() as session:
        assert session.get(Reservation, "r-1").status == states.PAUSED
