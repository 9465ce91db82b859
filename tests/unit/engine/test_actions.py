"""engine/actions.py: list, show, resume and revert flows, run by real conductor threads.

The flows here are made of ``Switch`` tasks whose faults the test turns on
and off (a host that fails, then is repaired), recording every execute and
revert so the tests can count exactly what ran again.
"""

from __future__ import annotations

import threading
import time

import pytest
from taskflow import states as tf_states
from taskflow.patterns import linear_flow
from taskflow.types import failure as tf_failure

from fleetflow.common.exceptions import Conflict, InvalidInput, NotFound
from fleetflow.engine import actions
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.pool import ConductorPool
from fleetflow.flows import registry
from fleetflow.flows.tasks.base import FleetTask

FAULTS: set[tuple[str, str]] = set()  # (atom name, "execute" | "revert")
CALLS: list[tuple[str, str, str]] = []  # (event, atom, "ok" | "failed" | result type)
_lock = threading.Lock()


def _call(event, atom, outcome):
    with _lock:
        CALLS.append((event, atom, outcome))


class Switch(FleetTask):
    """Fails while FAULTS names it. Revert: records it (and what result it was given)."""

    def execute(self, flow_id):
        if (self.name, "execute") in FAULTS:
            _call("execute", self.name, "failed")
            raise RuntimeError(f"{self.name} is broken")
        _call("execute", self.name, "ok")
        return self.name

    def revert(self, flow_id, result=None, **kwargs):
        kind = "failure" if isinstance(result, tf_failure.Failure) else "result"
        if (self.name, "revert") in FAULTS:
            _call("revert", self.name, "failed")
            raise RuntimeError(f"{self.name} cannot be undone")
        _call("revert", self.name, kind)


@registry.flow_factory("ops-switches")
def switches_flow(count: int):
    """count Switch atoms in a line: inst-0000-step, inst-0001-step ..."""
    flow = linear_flow.Flow("ops-switches")
    for index in range(count):
        flow.add(Switch(name=f"inst-{index:04d}-step"))
    return flow


STEP = [f"inst-{i:04d}-step" for i in range(3)]


@pytest.fixture(autouse=True)
def _reset_switches():
    FAULTS.clear()
    CALLS.clear()
    yield
    FAULTS.clear()


def calls(event=None, outcome=None):
    with _lock:
        return [(e, a) for e, a, o in CALLS
                if (event is None or e == event) and (outcome is None or o == outcome)]


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.03)


@pytest.fixture
def run_until(engine_conf, board, memory_backend):
    """``run_until(flow_id, *states)``: conductors run until the flow is in one of them."""
    def _run(flow_id, *wanted):
        with ConductorPool(engine_conf, workers=1, persistence=memory_backend,
                           wait_timeout=0.05):
            _wait(lambda: actions.show_flow(memory_backend, flow_id)["state"] in wanted
                  and board.job_count == 0)
        return actions.show_flow(memory_backend, flow_id)

    return _run


def _submit(board, backend, count=3, **options):
    return submit_mod.submit(board, backend, "ops-switches", {"count": count}, **options)


def test_list_filters_by_state_and_tenant_and_pages_newest_first(board, memory_backend,
                                                                 run_until):
    done = _submit(board, memory_backend, 1, owner_tenant="t1")
    run_until(done, tf_states.SUCCESS)
    waiting = [_submit(board, memory_backend, 1, owner_tenant=t) for t in ("t1", "t2")]
    newest_first = [*reversed(waiting), done]

    every, more = actions.list_flows(memory_backend)
    assert [f["id"] for f in every] == newest_first and more is False
    assert {f["id"]: f["state"] for f in every} == {
        done: "SUCCESS", waiting[0]: "PENDING", waiting[1]: "PENDING"}
    assert [f["id"] for f in actions.list_flows(memory_backend, state="SUCCESS")[0]] == [done]
    mine = actions.list_flows(memory_backend, tenant="t2")[0]
    assert [f["owner_tenant"] for f in mine] == ["t2"]
    assert mine[0]["name"] == "ops-switches" and mine[0]["on_error"] == "revert"
    assert mine[0]["submitted_at"]
    first, more = actions.list_flows(memory_backend, limit=2)
    assert more is True and len(first) == 2
    rest, more = actions.list_flows(memory_backend, limit=2, marker=first[-1]["id"])
    assert more is False and [f["id"] for f in first + rest] == newest_first
    with pytest.raises(InvalidInput):
        actions.list_flows(memory_backend, state="BROKEN")
    with pytest.raises(InvalidInput):
        actions.list_flows(memory_backend, marker="no-such-flow")


def test_a_paused_flow_is_listed_paused_and_shows_its_failure(board, memory_backend,
                                                              run_until):
    FAULTS.add((STEP[1], "execute"))
    flow_id = _submit(board, memory_backend, on_error="pause", owner_tenant="t1")
    flow = run_until(flow_id, actions.PAUSED)

    assert (flow["state"], flow["paused_at"], flow["on_error"]) == ("PAUSED", STEP[1], "pause")
    atoms = {a["name"]: a for a in flow["atoms"]}
    assert atoms[STEP[0]]["state"] == "SUCCESS" and atoms[STEP[0]]["attempts"] == 1
    assert atoms[STEP[1]]["state"] == "FAILURE" and atoms[STEP[1]]["kind"] == "task"
    assert atoms[STEP[1]]["failure"] == {"type": "RuntimeError",
                                         "message": f"{STEP[1]} is broken", "step": STEP[1]}
    assert atoms[STEP[2]]["state"] == "PENDING" and atoms[STEP[2]]["attempts"] == 0
    assert flow["failure"] == atoms[STEP[1]]["failure"]
    assert [f["id"] for f in actions.list_flows(memory_backend, state="PAUSED")[0]] == [flow_id]
    assert actions.list_flows(memory_backend, state="SUSPENDED")[0] == []
    with pytest.raises(NotFound):
        actions.show_flow(memory_backend, flow_id, tenant="t2")


def test_resume_of_a_paused_flow_reruns_only_the_failed_atom(board, memory_backend,
                                                             run_until):
    FAULTS.add((STEP[1], "execute"))
    flow_id = _submit(board, memory_backend, on_error="pause")
    run_until(flow_id, actions.PAUSED)
    FAULTS.clear()  # the operator repaired what broke

    resumed = actions.resume(board, memory_backend, flow_id)
    assert resumed["state"] == tf_states.SUSPENDED and resumed["paused_at"] is None
    atoms = {a["name"]: a for a in resumed["atoms"]}
    assert (atoms[STEP[1]]["state"], atoms[STEP[1]]["intention"]) == ("PENDING", "EXECUTE")
    assert atoms[STEP[1]]["failure"] is None
    # Asked twice: still one job.
    actions.resume(board, memory_backend, flow_id)
    assert [j.name for j in board.iterjobs()] == [flow_id]

    flow = run_until(flow_id, tf_states.SUCCESS)
    assert flow["state"] == tf_states.SUCCESS
    assert calls("execute", "ok") == [("execute", s) for s in STEP]  # each once
    assert calls("execute", "failed") == [("execute", STEP[1])]
    assert calls("revert") == []


def test_a_paused_flow_that_fails_again_pauses_again(board, memory_backend, run_until):
    FAULTS.add((STEP[2], "execute"))
    flow_id = _submit(board, memory_backend, on_error="pause")
    run_until(flow_id, actions.PAUSED)
    actions.resume(board, memory_backend, flow_id)  # not repaired
    flow = run_until(flow_id, actions.PAUSED)
    assert flow["paused_at"] == STEP[2]
    assert calls("execute", "failed") == [("execute", STEP[2])] * 2
    assert calls("revert") == []


def test_revert_of_a_paused_flow_undoes_what_ran(board, memory_backend, run_until):
    FAULTS.add((STEP[1], "execute"))
    flow_id = _submit(board, memory_backend, on_error="pause")
    run_until(flow_id, actions.PAUSED)

    marked = actions.revert(board, memory_backend, flow_id)
    assert marked["on_error"] == "revert" and marked["state"] == tf_states.SUSPENDED
    assert {a["intention"] for a in marked["atoms"]} == {"REVERT"}
    actions.revert(board, memory_backend, flow_id)  # idempotent
    assert board.job_count == 1

    flow = run_until(flow_id, tf_states.REVERTED)
    assert [a["state"] for a in flow["atoms"]] == ["REVERTED", "REVERTED", "PENDING"]
    # The failed atom's revert got its Failure; the done one its result.
    assert sorted(e for e in CALLS if e[0] == "revert") == [
        ("revert", STEP[0], "result"), ("revert", STEP[1], "failure")]
    assert calls("execute", "ok") == [("execute", STEP[0])]
    assert actions.revert(board, memory_backend, flow_id)["state"] == "REVERTED"


def test_revert_of_a_suspended_flow_without_failure(board, memory_backend, run_until):
    from taskflow import engines

    flow_id = _submit(board, memory_backend, 3)
    # A first engine stops after one atom, as a graceful conductor stop does.
    detail = memory_backend.get_connection().get_flow_details(flow_id)
    engine = engines.load_from_detail(detail, store={"flow_id": flow_id},
                                      backend=memory_backend, engine="serial")
    engine.atom_notifier.register(tf_states.SUCCESS, lambda *_a, **_k: engine.suspend())
    engine.run()
    assert actions.show_flow(memory_backend, flow_id)["state"] == tf_states.SUSPENDED

    actions.revert(board, memory_backend, flow_id)
    flow = run_until(flow_id, tf_states.REVERTED)
    assert [a["state"] for a in flow["atoms"]] == ["REVERTED", "PENDING", "PENDING"]
    assert calls("revert") == [("revert", STEP[0])]
    assert calls("execute") == [("execute", STEP[0])]
    with pytest.raises(Conflict):
        actions.resume(board, memory_backend, flow_id)


def test_a_failed_revert_is_retried_alone_on_resume(board, memory_backend, run_until):
    FAULTS.update({(STEP[1], "execute"), (STEP[0], "revert")})
    flow_id = _submit(board, memory_backend)
    flow = run_until(flow_id, tf_states.FAILURE)
    atoms = {a["name"]: a for a in flow["atoms"]}
    assert atoms[STEP[0]]["state"] == tf_states.REVERT_FAILURE
    assert atoms[STEP[0]]["revert_failure"]["message"] == f"{STEP[0]} cannot be undone"
    assert atoms[STEP[1]]["state"] == tf_states.REVERTED
    FAULTS.clear()

    resumed = actions.resume(board, memory_backend, flow_id)
    atoms = {a["name"]: a for a in resumed["atoms"]}
    assert (atoms[STEP[0]]["state"], atoms[STEP[0]]["intention"]) == ("SUCCESS", "REVERT")
    flow = run_until(flow_id, tf_states.REVERTED)
    assert flow["state"] == tf_states.REVERTED
    # One more revert of step 0 and nothing else: no execute ran again.
    assert calls("revert") == [("revert", STEP[1]), ("revert", STEP[0]), ("revert", STEP[0])]
    assert calls("execute", "ok") == [("execute", STEP[0])]


def test_settled_and_unknown_flows_are_refused(board, memory_backend, run_until):
    ok = _submit(board, memory_backend, 1)
    run_until(ok, tf_states.SUCCESS)
    FAULTS.add((STEP[0], "execute"))
    reverted = _submit(board, memory_backend, 1)
    run_until(reverted, tf_states.REVERTED)
    executed = len(CALLS)
    for flow_id in (ok, reverted):
        with pytest.raises(Conflict):
            actions.resume(board, memory_backend, flow_id)
    with pytest.raises(Conflict):
        actions.revert(board, memory_backend, ok)
    with pytest.raises(NotFound):
        actions.resume(board, memory_backend, "no-such-flow")
    with pytest.raises(NotFound):
        actions.revert(board, memory_backend, "no-such-flow")
    with pytest.raises(NotFound):
        actions.show_flow(memory_backend, "no-such-flow")
    assert board.job_count == 0 and len(CALLS) == executed


def test_resume_of_a_running_flow_only_posts_its_missing_job(board, memory_backend, run_until):
    flow_id = _submit(board, memory_backend, 2)
    # Its conductor died and the job vanished with it (claimed and consumed).
    [job] = list(board.iterjobs())
    board.claim(job, "dead")
    board.consume(job, "dead")
    detail = memory_backend.get_connection().get_flow_details(flow_id)
    detail.state = tf_states.RUNNING
    memory_backend.get_connection().update_flow_details(detail)
    with pytest.raises(Conflict):
        actions.revert(board, memory_backend, flow_id)
    assert actions.resume(board, memory_backend, flow_id)["state"] == tf_states.RUNNING
    assert [j.name for j in board.iterjobs()] == [flow_id]
    assert run_until(flow_id, tf_states.SUCCESS)["state"] == tf_states.SUCCESS


def test_list_on_the_logbook_backend_reads_in_batches(engine_conf, database, monkeypatch):
    from fleetflow.engine.engines import logbook_backend
    from fleetflow.engine.jobboard.boards import make_jobboard

    backend = logbook_backend(engine_conf)
    board = make_jobboard(engine_conf, backend)
    try:
        ids = [_submit(board, backend, 1, owner_tenant=f"t{i % 2}") for i in range(5)][::-1]
        monkeypatch.setattr(actions, "_LIST_BATCH", 2)  # several batches for 5 flows
        page, more = actions.list_flows(backend, limit=3)
        assert [f["id"] for f in page] == ids[:3] and more is True
        page, more = actions.list_flows(backend, limit=3, marker=ids[2])
        assert [f["id"] for f in page] == ids[3:] and more is False
        odd = actions.list_flows(backend, tenant="t1", state="PENDING")[0]
        assert len(odd) == 2 and {f["owner_tenant"] for f in odd} == {"t1"}
        assert actions.show_flow(backend, ids[0])["atoms"] == []
        with pytest.raises(InvalidInput):
            actions.list_flows(backend, marker="no-such-flow")
    finally:
        board.close()


def test_resume_redoes_an_atom_reverted_before_the_pause_took_hold(board, memory_backend,
                                                                   run_until):
    FAULTS.add((STEP[1], "execute"))
    flow_id = _submit(board, memory_backend, on_error="pause")
    run_until(flow_id, actions.PAUSED)
    # What a parallel engine may leave: a revert that began before the suspend.
    conn = memory_backend.get_connection()
    detail = conn.get_flow_details(flow_id)
    atom = next(a for a in detail if a.name == STEP[0])
    atom.state, atom.intention = tf_states.REVERTED, tf_states.REVERT
    conn.update_atom_details(atom)
    FAULTS.clear()

    actions.resume(board, memory_backend, flow_id)
    assert run_until(flow_id, tf_states.SUCCESS)["state"] == tf_states.SUCCESS
    assert calls("execute", "ok") == [("execute", STEP[0]), ("execute", STEP[0]),
                                      ("execute", STEP[1]), ("execute", STEP[2])]


def test_resume_while_the_pausing_conductor_still_holds_the_old_job(board, memory_backend,
                                                                    run_until):
    FAULTS.add((STEP[1], "execute"))
    flow_id = _submit(board, memory_backend, on_error="pause")
    run_until(flow_id, actions.PAUSED)
    # The moment between the engine saving PAUSED and its conductor consuming
    # the job: an operator resumes then (found over HTTP in the embedded cloud).
    old = submit_mod.post_job(board, memory_backend.get_connection().get_logbook(flow_id),
                              flow_id)
    board.claim(old, "pausing-conductor")
    FAULTS.clear()

    actions.resume(board, memory_backend, flow_id)
    board.consume(old, "pausing-conductor")  # what that conductor does next
    assert [j.name for j in board.iterjobs()] == [flow_id]  # a new one
    assert run_until(flow_id, tf_states.SUCCESS)["state"] == tf_states.SUCCESS
