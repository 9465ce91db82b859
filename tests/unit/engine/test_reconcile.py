"""The board re-derived from the database; lost jobs replaced; only recorded ends consumed.

Embedded mode: the SQL jobboard and fleetflow's logbook backend on one
SQLite database; the toy flows of conftest.py.
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.engine import reconcile as reconcile_mod
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.pool import ConductorPool
from fleetflow.engine.conductor.worker import make_conductor
from fleetflow.persistence import intents
from fleetflow.persistence import jobs as jobs_db
from fleetflow.persistence.jobs import Job as JobRow
from fleetflow.persistence.logbook import backend as logbook_backend
from fleetflow.persistence.logbook.backend import LogbookBackend


@pytest.fixture
def sql_backend(database):
    return LogbookBackend({"connection": database.url}, engine=database.engine)


@pytest.fixture
def sql_board(engine_conf, database, sql_backend):
    from fleetflow.engine.jobboard.boards import make_jobboard

    board = make_jobboard(engine_conf, sql_backend)
    yield board
    board.close()


@pytest.fixture
def submitter(sql_board, sql_backend):
    return submit_mod.Submitter(sql_board, sql_backend)


def _wait(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _state(backend, flow_id):
    return submit_mod.load_status(backend, flow_id)["state"]


def _job_rows(database, flow_id):
    with database.session() as session:
        return [(r.uuid, r.state, r.owner) for r in session.scalars(
            sa.select(JobRow).where(JobRow.name == flow_id).order_by(JobRow.sequence))]


def _run_to(engine_conf, backend, board, flow_id, state):
    with ConductorPool(engine_conf, workers=1, persistence=backend, wait_timeout=0.05):
        _wait(lambda: _state(backend, flow_id) == state and board.job_count == 0,
              what=f"{flow_id} {state} and its job consumed")


def test_a_settled_flows_leftover_job_is_consumed(engine_conf, database, sql_board,
                                                  sql_backend, submitter, effects_log):
    flow_id = submitter("toy-linear", {"count": 2})
    _run_to(engine_conf, sql_backend, sql_board, flow_id, tf_states.SUCCESS)
    submit_mod.ensure_posted(sql_board, sql_backend, flow_id)  # left behind by a crash
    counts = reconcile_mod.reconcile(sql_board, sql_backend, database, engine_conf)
    assert (counts["consumed"], counts["reposted"], counts["unfinished"]) == (1, 0, 0)
    assert sql_board.job_count == 0
    assert len(effects_log("execute")) == 2  # never run again


def test_a_paused_flow_is_left_alone(engine_conf, database, sql_board, sql_backend,
                                     submitter, effects_log):
    flow_id = submitter("toy-linear", {"count": 3, "fail_at": 1}, on_error="pause")
    _run_to(engine_conf, sql_backend, sql_board, flow_id, tf_states.SUSPENDED)
    assert submit_mod.load_status(sql_backend, flow_id)["paused"]
    counts = reconcile_mod.reconcile(sql_board, sql_backend, database, engine_conf)
    assert (counts["reposted"], counts["consumed"], counts["unfinished"]) == (0, 0, 1)
    assert sql_board.job_count == 0
    assert effects_log("revert") == []


def test_a_flow_without_a_job_gets_one_after_the_grace(monkeypatch, engine_conf, database,
                                                       sql_board, sql_backend, submitter):
    with monkeypatch.context() as patch:
        patch.setattr(sql_board, "post", lambda *a, **kw: (_ for _ in ()).throw(
            ConnectionError("the jobboard is down")))
        with database.session() as session:
            flow_id = submitter("toy-linear", {"count": 1}, session=session)
    memory = reconcile_mod.Memory()
    counts = reconcile_mod.reconcile(sql_board, sql_backend, database, engine_conf, memory)
    assert counts["reposted"] == 0 and flow_id in memory.missing
    # A keep-alive had its chance (two rounds) and the old lease is over.
    memory.missing[flow_id] -= reconcile_mod.grace(engine_conf)
    counts = reconcile_mod.reconcile(sql_board, sql_backend, database, engine_conf, memory)
    assert counts["reposted"] == 1 and memory.missing == {}
    assert [job.name for job in sql_board.iterjobs()] == [flow_id]
    assert reconcile_mod.reconcile(sql_board, sql_backend, database, engine_conf,
                                   memory)["reposted"] == 0


def test_each_board_reconciles_its_own_flows(monkeypatch, engine_conf, database, sql_board,
                                             sql_backend, submitter):
    from fleetflow.engine.jobboard.sql import SqlJobBoard

    monkeypatch.setattr(sql_board, "post", lambda *a, **kw: (_ for _ in ()).throw(
        ConnectionError("the jobboard is down")))
    with database.session() as session:
        flow_id = submitter("toy-linear", {"count": 1}, session=session)
    monkeypatch.undo()
    other = SqlJobBoard("another-cloud", {}, database, persistence=sql_backend)
    other.connect()
    assert reconcile_mod.reconcile(other, sql_backend, database, engine_conf)["reposted"] == 0
    assert other.job_count == 0
    assert reconcile_mod.reconcile(sql_board, sql_backend, database,
                                   engine_conf)["reposted"] == 1
    assert [job.name for job in sql_board.iterjobs()] == [flow_id]


def test_the_grace_outlasts_a_keepalive_and_a_lease(engine_conf):
    # claim_expiry 2 s, keep-alive 0.3 s, reconcile every 10 s.
    assert reconcile_mod.grace(engine_conf) == 10.0
    engine_conf.set_override("reconcile_interval", 1.0, group="conductor")
    assert reconcile_mod.grace(engine_conf) == 2.0


def test_a_job_deleted_while_its_flow_runs_is_replaced_and_consumed_once(
        engine_conf, database, sql_board, sql_backend, submitter, effects_log):
    # 8 x 0.3 s under 2 s claims: the keep-alive (every 0.3 s) runs all along.
    flow_id = submitter("toy-linear", {"count": 8, "sleep": 0.3})
    [(first, _, _)] = _job_rows(database, flow_id)
    with ConductorPool(engine_conf, workers=1, persistence=sql_backend, wait_timeout=0.05):
        _wait(lambda: effects_log("execute"), what="the flow to start")
        with database.session() as session:  # the board forgets the job
            session.execute(sa.delete(JobRow).where(JobRow.uuid == first))
        _wait(lambda: _state(sql_backend, flow_id) == tf_states.SUCCESS
              and sql_board.job_count == 0, what="the flow to finish and its job to go")
    executed = effects_log("execute")
    assert len(executed) == 8 and {token for _, _, token in executed} == {1}
    [(replacement, state, owner)] = _job_rows(database, flow_id)
    assert replacement != first and state == jobs_db.JOB_COMPLETE and owner.endswith("-0")


@pytest.mark.parametrize("fault", ["unrecorded", "unreadable"])
def test_a_flow_whose_end_is_not_in_storage_is_not_consumed(monkeypatch, engine_conf,
                                                            database, sql_board, sql_backend,
                                                            submitter, effects_log, fault):
    flow_id = submitter("toy-linear", {"count": 2})
    connection = logbook_backend.LogbookConnection
    if fault == "unrecorded":
        def losing_success(write):
            def lose_success(self, flow_detail, *args, **kwargs):
                if flow_detail.state == tf_states.SUCCESS:
                    flow_detail = flow_detail.copy()
                    flow_detail.state = tf_states.RUNNING  # the write that never landed
                return write(self, flow_detail, *args, **kwargs)
            return lose_success

        # The fleetflow engine saves the flow's state alone; the stock one with its atoms.
        for write in ("update_flow_details", "update_flow_fields"):
            monkeypatch.setattr(connection, write, losing_success(getattr(connection, write)))
    else:
        read = connection.get_flow_details

        def unreadable(self, fd_uuid, lazy=False):
            if lazy:
                raise ConnectionError("the database went away")
            return read(self, fd_uuid, lazy)

        monkeypatch.setattr(connection, "get_flow_details", unreadable)
    conductor = make_conductor(engine_conf, "careful", persistence=sql_backend,
                               wait_timeout=0.05)
    finished = []
    finish = conductor._try_finish_job
    conductor._try_finish_job = lambda job, consume, trash=False: (
        finished.append(consume), finish(job, consume, trash))
    try:
        conductor.run(max_dispatches=1)  # runs, and takes the abandoned job once more
    finally:
        conductor.close()
    # The run's end could not be confirmed: abandoned for another run.
    assert finished[0] is False
    assert len(effects_log("execute")) == 2
    [(_, state, owner)] = _job_rows(database, flow_id)
    if fault == "unrecorded":
        assert finished == [False, False]
        assert (state, owner) == (jobs_db.JOB_POSTED, None)
    else:
        # Only the read failed: the next look finds SUCCESS and consumes it.
        assert finished == [False, True] and state == jobs_db.JOB_COMPLETE
    monkeypatch.undo()
    _run_to(engine_conf, sql_backend, sql_board, flow_id, tf_states.SUCCESS)
    assert len(effects_log("execute")) == 2  # the next run only records the end


def test_a_duplicate_job_of_a_flow_run_elsewhere_is_consumed_unrun(
        engine_conf, database, sql_board, sql_backend, submitter, effects_log):
    flow_id = submitter("toy-linear", {"count": 1})
    [older] = list(sql_board.iterjobs())
    sql_board.claim(older, "busy-conductor", 60)
    newer = submit_mod.post_job(sql_board, submit_mod._existing_book(sql_backend, flow_id),
                                flow_id)
    conductor = make_conductor(engine_conf, "second", persistence=sql_backend,
                               wait_timeout=0.05)
    runner = threading.Thread(target=conductor.run)
    runner.start()
    try:
        _wait(lambda: not sql_board.job_exists(newer), what="the duplicate to be consumed")
    finally:
        conductor.stop()
        runner.join(30)
        conductor.close()
    assert effects_log() == []
    assert sql_board.find_owner(older) == "busy-conductor"


def test_one_reconciler_per_board_does_the_pass(engine_conf, database, sql_backend):
    first = reconcile_mod.Reconciler(engine_conf, sql_backend, database, name="one")
    second = reconcile_mod.Reconciler(engine_conf, sql_backend, database, name="two")
    try:
        assert first.run_once() is not None
        assert second.run_once() is None
        assert first.run_once() is not None
    finally:
        first.stop()
        second.stop()


def test_a_reconciler_whose_board_fails_hands_the_pass_to_another(engine_conf, database,
                                                                   sql_backend):
    first = reconcile_mod.Reconciler(engine_conf, sql_backend, database, name="one")
    second = reconcile_mod.Reconciler(engine_conf, sql_backend, database, name="two")
    try:
        assert first.run_once() is not None
        broken = first._board

        def unreachable(*args, **kwargs):
            raise ConnectionError("board unreachable from this process")

        broken.iterjobs = unreachable
        with pytest.raises(ConnectionError):
            first.run_once()
        # Without the failed holder's lease the other process's pass runs at once.
        assert second.run_once() is not None
        assert first.run_once() is None
        with database.session() as session:
            intents.release_lease(session, engine_conf.jobboard.board_name, second.name)
        # Back with the lease, the first builds its board afresh.
        assert first.run_once() is not None
        assert first._board is not broken
    finally:
        first.stop()
        second.stop()


def test_the_unfinished_flows_query_uses_the_state_index(database):
    from fleetflow.persistence.logbook.models import FLOWDETAILS

    fd = FLOWDETAILS.c
    stmt = sa.select(fd.uuid).where(sa.or_(fd.state.in_(reconcile_mod.UNFINISHED_STATES),
                                           fd.state.is_(None)))
    compiled = stmt.compile(database.engine, compile_kwargs={"literal_binds": True})
    with database.engine.connect() as conn:
        plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(
            f"EXPLAIN QUERY PLAN {compiled}"))
    assert "ix_tf_flowdetails_state" in plan, plan


def test_a_stopped_run_that_wrote_an_end_its_atoms_contradict_is_resumed_later(
        engine_conf, database, sql_board, sql_backend, submitter, effects_log):
    """A conductor stopped just as it resumes a flow left mid-atom must not consume it.

    TaskFlow then records REVERTED with the resumed atom still RUNNING and nothing
    undone; the conductor sets it back to SUSPENDED and abandons its job.
    """
    import contextlib
    import types

    from taskflow.persistence import models as tf_models

    flow_id = submitter("toy-linear", {"count": 2})
    with contextlib.closing(sql_backend.get_connection()) as conn:
        flow_detail = conn.get_flow_details(flow_id)
        atom = tf_models.TaskDetail("left-running", uuid=f"{flow_id[:-4]}beef")
        atom.state = tf_states.RUNNING
        flow_detail.add(atom)
        flow_detail.state = tf_states.REVERTED
        conn.update_flow_details(flow_detail)
    conductor = make_conductor(engine_conf, "stopping", persistence=sql_backend,
                               wait_timeout=0.05)
    try:
        job = types.SimpleNamespace(name=flow_id, uuid="job-1",
                                    details={"flow_uuid": flow_id})
        assert conductor._end_recorded(job) is True  # not stopping: taken as the end
        conductor.stop()
        assert conductor._end_recorded(job) is False
    finally:
        conductor.close()
    assert _state(sql_backend, flow_id) == tf_states.SUSPENDED
