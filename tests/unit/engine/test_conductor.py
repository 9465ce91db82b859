"""engine/conductor/worker.py + submit.py: flows run by conductor threads, in memory.

The logbook lives in TaskFlow's in-memory backend; jobs and fences in a
SQLite database, as in embedded mode.
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow.listeners import base as listener_base

from fleetflow.common.exceptions import InvalidInput, NotFound
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.pool import ConductorPool
from fleetflow.engine.conductor.worker import make_conductor
from fleetflow.engine.fencing import FencedBackend, StaleCheckpoint
from fleetflow.flows import keys, registry
from fleetflow.persistence import fences

SETTLED = (tf_states.SUCCESS, tf_states.REVERTED, tf_states.SUSPENDED, tf_states.FAILURE)


LISTENED: list[tuple[str, bool]] = []


class _Listened(listener_base.Listener):
    """Notes the flow it listened to and whether it was told the flow is paused."""

    def __init__(self, engine, database, *, paused):
        super().__init__(engine)
        LISTENED.append((engine.storage.flow_uuid, paused()))


@registry.flow_factory("toy-listened", listeners=(_Listened,))
def toy_listened(count: int):
    """The toy line, with a listener declared."""
    return registry.build("toy-linear", count=count)


def _wait_settled(backend, flow_ids, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {f: submit_mod.load_status(backend, f)["state"] for f in flow_ids}
        if all(state in SETTLED for state in found.values()):
            return found
        time.sleep(0.05)
    raise AssertionError(f"flows did not settle: {found}")


def _wait_state(backend, flow_id, wanted, timeout=30.0):
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = submit_mod.load_status(backend, flow_id)["state"]
        if state == wanted:
            return
        time.sleep(0.05)
    raise AssertionError(f"flow {flow_id} is {state}, not {wanted}")


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _clear_paused(backend, flow_id):
    conn = backend.get_connection()
    detail = conn.get_flow_details(flow_id)
    detail.meta["fleetflow"]["paused"] = False
    conn.update_flow_details(detail)


def test_a_settled_flow_is_never_run_again(engine_conf, board, memory_backend, effects_log):
    # A conductor died after its flow reverted and before consuming the job:
    # TaskFlow would run the REVERTED flow again from scratch.
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear",
                                {"count": 2, "fail_at": 1})
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        _wait_state(memory_backend, flow_id, tf_states.REVERTED)
    runs = len(effects_log())
    submit_mod.ensure_posted(board, memory_backend, flow_id)  # the job left behind
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        _wait(lambda: board.job_count == 0)
    assert len(effects_log()) == runs
    assert submit_mod.load_status(memory_backend, flow_id)["state"] == tf_states.REVERTED


def test_submit_saves_the_flow_under_one_id_and_posts_its_job(board, memory_backend):
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear", {"count": 2},
                                store={"extra": 1}, owner_tenant="t1")
    status = submit_mod.load_status(memory_backend, flow_id)
    assert (status["id"], status["state"], status["flow_name"]) == (flow_id, "PENDING",
                                                                     "toy-linear")
    assert status["owner_tenant"] == "t1" and status["on_error"] == "revert"
    [job] = list(board.iterjobs())
    assert job.name == flow_id and job.details["flow_uuid"] == flow_id
    assert job.book_uuid == flow_id


def test_submit_refuses_bad_input_before_posting(board, memory_backend):
    with pytest.raises(InvalidInput):
        submit_mod.submit(board, memory_backend, "toy-linear", {"count": 1},
                          on_error="ignore")
    with pytest.raises(InvalidInput):
        submit_mod.submit(board, memory_backend, "no-such-flow", {})
    with pytest.raises(InvalidInput):
        submit_mod.submit(board, memory_backend, "toy-linear", {"count": 1},
                          store={"when": object()})
    assert board.job_count == 0


def test_submitting_a_known_id_again_posts_at_most_one_job(board, memory_backend):
    submitter = submit_mod.Submitter(board, memory_backend)
    flow_id = submitter("toy-linear", {"count": 1}, tenant_id="t1")
    assert submitter("toy-linear", {"count": 1}, tenant_id="t1", flow_id=flow_id) == flow_id
    assert [j.name for j in board.iterjobs()] == [flow_id]


def test_load_status_of_an_unknown_flow_is_not_found(memory_backend):
    with pytest.raises(NotFound):
        submit_mod.load_status(memory_backend, "no-such-flow")


def test_pool_runs_flows_to_success_with_a_fence_token_each(engine_conf, board, memory_backend,
                                                           effects_log):
    flow_ids = [submit_mod.submit(board, memory_backend, "toy-linear", {"count": 3})
                for _ in range(4)]
    with ConductorPool(engine_conf, workers=2, persistence=memory_backend, wait_timeout=0.05):
        states = _wait_settled(memory_backend, flow_ids)
    assert set(states.values()) == {tf_states.SUCCESS}
    status = submit_mod.load_status(memory_backend, flow_ids[0])
    assert [a["state"] for a in status["atoms"]] == [tf_states.SUCCESS] * 3
    assert len(effects_log("execute")) == 12  # every atom once
    assert {token for _, _, token in effects_log("execute")} == {1}
    assert board.job_count == 0  # consumed


def test_the_conductor_attaches_the_listeners_the_flow_declares(engine_conf, board,
                                                                memory_backend):
    LISTENED.clear()
    listened = submit_mod.submit(board, memory_backend, "toy-listened", {"count": 1})
    plain = submit_mod.submit(board, memory_backend, "toy-linear", {"count": 1})
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        _wait_settled(memory_backend, [listened, plain])
    assert LISTENED == [(listened, False)]
    assert registry.listeners_of("toy-listened") == (_Listened,)
    assert registry.listeners_of("toy-linear") == ()


def test_a_failure_reverts_the_flow_and_consumes_its_job(engine_conf, board, memory_backend,
                                                        effects_log):
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear",
                                {"count": 3, "fail_at": 2})
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        assert _wait_settled(memory_backend, [flow_id])[flow_id] == tf_states.REVERTED
    assert sorted(a for _, a, _ in effects_log("revert")) == [
        "inst-0000-step", "inst-0001-step", "inst-0002-step"]
    status = submit_mod.load_status(memory_backend, flow_id)
    failed = {a["name"]: a for a in status["atoms"]}
    assert failed["inst-0002-step"]["state"] == tf_states.REVERTED
    assert board.job_count == 0


def test_on_error_pause_stops_before_any_revert(engine_conf, board, memory_backend,
                                                effects_log):
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear",
                                {"count": 3, "fail_at": 1}, on_error="pause")
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        assert _wait_settled(memory_backend, [flow_id])[flow_id] == tf_states.SUSPENDED
        time.sleep(0.3)  # give a wrong conductor time to pick the job up again
    assert effects_log("revert") == []
    atoms = {a["name"]: a for a in submit_mod.load_status(memory_backend, flow_id)["atoms"]}
    assert atoms["inst-0000-step"]["state"] == tf_states.SUCCESS
    assert atoms["inst-0001-step"]["state"] == tf_states.FAILURE
    assert atoms["inst-0001-step"]["failure"] == {
        "type": "RuntimeError", "message": "inst-0001-step failed on purpose",
        "step": "inst-0001-step"}
    assert atoms["inst-0002-step"]["state"] == tf_states.PENDING
    # Consumed, so no conductor resumes (and thereby reverts) it on its own,
    # and marked paused, so even a re-posted job leaves it alone ...
    assert board.job_count == 0
    assert submit_mod.load_status(memory_backend, flow_id)["paused"] is True
    submit_mod.ensure_posted(board, memory_backend, flow_id)
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        _wait(lambda: board.job_count == 0)
    assert submit_mod.load_status(memory_backend, flow_id)["state"] == tf_states.SUSPENDED
    assert effects_log("revert") == []
    # ... until the operator decides: here "revert" (clear the mark, re-post).
    _clear_paused(memory_backend, flow_id)
    submit_mod.ensure_posted(board, memory_backend, flow_id)
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        _wait_state(memory_backend, flow_id, tf_states.REVERTED)
    assert sorted(a for _, a, _ in effects_log("revert")) == ["inst-0000-step",
                                                              "inst-0001-step"]


def test_keepalive_holds_the_claim_through_a_run_longer_than_its_expiry(
        engine_conf, board, memory_backend, database, effects_log):
    # Claims last 2 s (engine_conf); this flow runs ~3 s.
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear",
                                {"count": 6, "sleep": 0.5})
    [job] = list(board.iterjobs())
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        deadline = time.monotonic() + 10
        while board.find_owner(job) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        attempts = 0
        while submit_mod.load_status(memory_backend, flow_id)["state"] not in SETTLED:
            try:
                board.claim(job, "rival")
            except (tf_exc.UnclaimableJob, tf_exc.NotFound):
                attempts += 1
            else:
                pytest.fail("the running job's claim lapsed and a rival took it")
            time.sleep(0.1)
    assert attempts > 10
    assert submit_mod.load_status(memory_backend, flow_id)["state"] == tf_states.SUCCESS
    assert len(effects_log("execute")) == 6


def test_a_conductor_that_lost_its_claim_suspends_its_engine(engine_conf, board, memory_backend,
                                                             database, effects_log):
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear",
                                {"count": 8, "sleep": 0.2})
    conductor = make_conductor(engine_conf, "slow", persistence=memory_backend,
                               wait_timeout=0.05)
    [job] = list(board.iterjobs())
    import threading

    runner = threading.Thread(target=conductor.run)
    runner.start()
    deadline = time.monotonic() + 10
    while not effects_log("execute") and time.monotonic() < deadline:
        time.sleep(0.02)
    # Another owner takes the job over (as after an expiry) and fences us out.
    with database.session() as session:
        session.execute(
            __import__("sqlalchemy").text(
                "UPDATE jobs SET owner = 'usurper', claim_expires_at = '2999-01-01' "
                "WHERE uuid = :u"), {"u": job.uuid})
        fences.advance(session, flow_id, "usurper")
    # The keep-alive notices, the engine stops, the dispatch ends.
    deadline = time.monotonic() + 10
    while job.uuid in conductor.keepalive.held() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.uuid not in conductor.keepalive.held()
    conductor.stop()
    runner.join(10)
    conductor.close()
    assert len(effects_log("execute")) < 8
    assert effects_log("revert") == []
    assert board.find_owner(job) == "usurper"


def test_a_claim_lost_before_the_engine_starts_runs_nothing_and_takes_no_fence(
        engine_conf, board, memory_backend, database, effects_log):
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear", {"count": 3})
    conductor = make_conductor(engine_conf, "late", persistence=memory_backend,
                               wait_timeout=0.05)
    [job] = list(board.iterjobs())
    alive = conductor.keepalive
    real_hold = alive.hold

    def taken_over_at_once(held_job):
        real_hold(held_job)
        # Another owner takes the job over (as after an expiry during an outage)
        # before this conductor has built its engine; the keep-alive notices.
        with database.session() as session:
            session.execute(sa.text("UPDATE jobs SET owner = 'usurper', claim_expires_at = "
                                    "'2999-01-01' WHERE uuid = :u"), {"u": job.uuid})
        alive.extend_now()
        assert alive.lost(held_job)
    alive.hold = taken_over_at_once
    released = []
    real_release = alive.release
    alive.release = lambda held_job: released.append(held_job.uuid) or real_release(held_job)
    runner = threading.Thread(target=conductor.run)
    runner.start()
    deadline = time.monotonic() + 10
    while not released and time.monotonic() < deadline:
        time.sleep(0.02)
    conductor.stop()
    runner.join(10)
    conductor.close()
    assert released == [job.uuid]
    assert effects_log("execute") == []
    with database.session() as session:
        assert fences.current(session.connection(), flow_id) == (None, None)
    assert board.find_owner(job) == "usurper"  # left to it, not trashed


def test_fenced_backend_refuses_checkpoints_from_a_stale_owner(database, memory_backend):
    with database.session() as session:
        old = fences.advance(session, "flow-x", "old")
    fenced = FencedBackend(memory_backend, database, old)
    from taskflow.persistence import models as tf_models

    book = tf_models.LogBook("b", uuid="flow-x")
    book.add(tf_models.FlowDetail("f", uuid="flow-x"))
    conn = fenced.get_connection()
    conn.save_logbook(book)
    with database.session() as session:
        fences.advance(session, "flow-x", "new")
    detail = conn.get_flow_details("flow-x")
    detail.state = tf_states.FAILURE
    with pytest.raises(StaleCheckpoint):
        conn.update_flow_details(detail)
    assert memory_backend.get_connection().get_flow_details("flow-x").state != "FAILURE"


def test_each_takeover_injects_a_newer_fence(engine_conf, board, memory_backend, database,
                                             effects_log):
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear", {"count": 1})
    with database.session() as session:
        fences.advance(session, flow_id, "an-earlier-owner")
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend, wait_timeout=0.05):
        _wait_settled(memory_backend, [flow_id])
    assert [token for _, _, token in effects_log("execute")] == [2]
    assert keys.FENCE == "fence"


def test_a_job_posted_in_process_wakes_an_idle_conductor(engine_conf, board, memory_backend):
    # The idle wait is ten minutes: only the wake-up can make the worker look in time.
    with ConductorPool(engine_conf, workers=1, persistence=memory_backend,
                       wait_timeout=600):
        time.sleep(0.5)  # the worker finds the board empty and starts waiting
        flow_id = submit_mod.submit(board, memory_backend, "toy-linear", {"count": 1})
        _wait_state(memory_backend, flow_id, tf_states.SUCCESS, timeout=120)


class _Waiting:
    """A conductor as the wake-up sees it: its idle wait (a thread in it once started)."""

    def __init__(self):
        from fleetflow.engine.conductor.worker import WakeableTimeout

        self.timeout = WakeableTimeout(600)
        self.thread = threading.Thread(target=self.timeout.wait, daemon=True)

    def wake(self):
        self.timeout.wake()

    def wake_if_idle(self):
        return self.timeout.wake_if_idle()


def _until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.01)


def test_a_posted_job_wakes_one_idle_conductor_and_every_one_when_none_idles(monkeypatch):
    import weakref

    from fleetflow.engine.conductor import worker

    conductors = [_Waiting() for _ in range(3)]
    monkeypatch.setattr(worker, "_local_conductors", weakref.WeakSet(conductors))
    for conductor in conductors[:2]:
        conductor.thread.start()
    _until(lambda: all(c.timeout._waiting for c in conductors[:2]), "two conductors idle")

    worker.wake_local_conductors()
    _until(lambda: sum(not c.thread.is_alive() for c in conductors[:2]) == 1,
           "exactly one idle conductor woken")
    time.sleep(0.2)
    # One job, one conductor: the other idle one still waits.
    assert sum(c.thread.is_alive() for c in conductors[:2]) == 1
    worker.wake_local_conductors()  # a second job takes the second idle conductor
    _until(lambda: not any(c.thread.is_alive() for c in conductors[:2]), "both woken")

    # None idle (the third is between a look at the board and its wait): every
    # conductor is poked, so the next wait of each returns at once.
    worker.wake_local_conductors()
    conductors[2].thread.start()
    conductors[2].thread.join(30)
    assert not conductors[2].thread.is_alive()


def test_the_idle_wait_ends_on_wake_and_on_stop():
    from fleetflow.engine.conductor.worker import WakeableTimeout

    timeout = WakeableTimeout(600)
    for end in (timeout.wake, timeout.interrupt):
        waiter = threading.Thread(target=timeout.wait)
        waiter.start()
        end()
        waiter.join(60)
        assert not waiter.is_alive()
    assert timeout.is_stopped()
