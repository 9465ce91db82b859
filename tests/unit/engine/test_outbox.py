"""The outbox: a flow's intent commits with its rows; posting follows, or the reconciler does.

Embedded mode as it runs: the SQL jobboard and fleetflow's logbook backend on
one SQLite database.
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.common.exceptions import InvalidInput
from fleetflow.engine import reconcile as reconcile_mod
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.pool import ConductorPool
from fleetflow.persistence import intents
from fleetflow.persistence.fences import Fence
from fleetflow.persistence.jobs import Job as JobRow
from fleetflow.persistence.logbook.backend import LogbookBackend
from fleetflow.persistence.logbook.models import LogbookRow


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


def _intent(database, flow_id):
    with database.session() as session:
        return intents.get(session, flow_id)


def _has_book(backend, flow_id):
    return submit_mod._existing_book(backend, flow_id) is not None


def _row(session, key="domain-row"):
    """A domain row written by the operation (any table will do)."""
    session.add(Fence(key=key, token=0, owner="operation"))


def _wait_state(backend, flow_id, wanted, timeout=30.0):
    deadline = time.monotonic() + timeout
    while (state := submit_mod.load_status(backend, flow_id)["state"]) != wanted:
        assert time.monotonic() < deadline, f"flow {flow_id} is {state}, not {wanted}"
        time.sleep(0.05)


def test_the_intent_commits_with_the_rows_and_is_materialized_after(
        database, sql_board, sql_backend, submitter):
    with database.session() as session:
        _row(session)
        flow_id = submitter("toy-linear", {"count": 2}, tenant_id="t1", session=session)
        # Nothing leaves the transaction before it commits (looked at from
        # inside it: on SQLite another connection would wait for its lock).
        assert session.get(LogbookRow, flow_id) is None
        assert session.scalars(sa.select(JobRow)).all() == []
    intent = _intent(database, flow_id)
    assert (intent.flow_name, intent.flow_kwargs, intent.owner_tenant) == (
        "toy-linear", {"count": 2}, "t1")
    assert intent.materialized_at is not None
    assert [job.name for job in sql_board.iterjobs()] == [flow_id]
    status = submit_mod.load_status(sql_backend, flow_id)
    assert (status["state"], status["owner_tenant"]) == ("PENDING", "t1")


def test_a_rolled_back_operation_leaves_nothing(database, sql_board, sql_backend, submitter):
    with pytest.raises(RuntimeError), database.session() as session:
        _row(session)
        flow_id = submitter("toy-linear", {"count": 1}, session=session)
        raise RuntimeError("the operation failed after submitting")
    assert _intent(database, flow_id) is None
    assert not _has_book(sql_backend, flow_id)
    assert sql_board.job_count == 0
    with database.session() as session:
        assert session.get(Fence, "domain-row") is None


@pytest.mark.parametrize("bad", [{"on_error": "ignore"}, {"flow_name": "no-such-flow"},
                                 {"store": {"when": object()}}])
def test_invalid_input_raises_inside_the_transaction(database, sql_board, submitter, bad):
    arguments = {"flow_name": "toy-linear", "store": None, "on_error": "revert"} | bad
    with pytest.raises(InvalidInput), database.session() as session:
        _row(session)
        submitter(arguments["flow_name"], {"count": 1}, store=arguments["store"],
                  on_error=arguments["on_error"], session=session)
    with database.session() as session:
        assert session.get(Fence, "domain-row") is None
        assert session.scalar(sa.select(sa.func.count()).select_from(intents.FlowIntent)) == 0
    assert sql_board.job_count == 0


def test_a_savepoint_released_inside_does_not_post_early(database, sql_board, submitter):
    with database.session() as session:
        flow_id = submitter("toy-linear", {"count": 1}, session=session)
        with session.begin_nested():
            _row(session)
        assert session.scalars(sa.select(JobRow)).all() == []
    assert [job.name for job in sql_board.iterjobs()] == [flow_id]


def test_a_failing_post_still_answers_and_the_reconciler_posts_it(
        monkeypatch, engine_conf, database, sql_board, sql_backend, submitter, effects_log):
    def down(*args, **kwargs):
        raise ConnectionError("the jobboard is down")

    with monkeypatch.context() as patch:
        patch.setattr(sql_board, "post", down)
        with database.session() as session:
            _row(session)
            flow_id = submitter("toy-linear", {"count": 2}, session=session)
    # Committed, saved, marked: only the job is missing.
    assert _intent(database, flow_id).materialized_at is not None
    assert _has_book(sql_backend, flow_id) and sql_board.job_count == 0
    counts = reconcile_mod.reconcile(sql_board, sql_backend, database, engine_conf)
    assert counts["reposted"] == 1
    with ConductorPool(engine_conf, workers=1, persistence=sql_backend, wait_timeout=0.05):
        _wait_state(sql_backend, flow_id, tf_states.SUCCESS)
        deadline = time.monotonic() + 10
        while sql_board.job_count:
            assert time.monotonic() < deadline, "the finished job was never consumed"
            time.sleep(0.05)
    assert len(effects_log("execute")) == 2


def test_a_crash_between_commit_and_post_is_repaired_by_the_reconciler(
        monkeypatch, engine_conf, database, sql_board, sql_backend, submitter, effects_log):
    # The process dies right after the commit: the hook never runs.
    monkeypatch.setattr(submit_mod.Submitter, "_after_commit", lambda *args: None)
    with database.session() as session:
        _row(session)
        flow_id = submitter("toy-linear", {"count": 1}, tenant_id="t1", session=session)
    assert _intent(database, flow_id).materialized_at is None
    assert not _has_book(sql_backend, flow_id)
    # Left to its submitter for a few seconds, then the reconciler's.
    assert reconcile_mod.reconcile(sql_board, sql_backend, database,
                                   engine_conf)["materialized"] == 0
    monkeypatch.setattr(reconcile_mod, "INTENT_GRACE", 0.0)
    counts = reconcile_mod.reconcile(sql_board, sql_backend, database, engine_conf)
    assert (counts["materialized"], counts["reposted"]) == (1, 0)
    assert _intent(database, flow_id).materialized_at is not None
    assert [job.name for job in sql_board.iterjobs()] == [flow_id]
    assert submit_mod.load_status(sql_backend, flow_id)["owner_tenant"] == "t1"
    with ConductorPool(engine_conf, workers=1, persistence=sql_backend, wait_timeout=0.05):
        _wait_state(sql_backend, flow_id, tf_states.SUCCESS)
    assert len(effects_log("execute")) == 1


def test_materializing_twice_posts_one_job(database, sql_board, sql_backend, submitter):
    with database.session() as session:
        flow_id = submitter("toy-linear", {"count": 1}, session=session)
    intent = _intent(database, flow_id)
    submit_mod.materialize(sql_board, sql_backend, database.engine, intent)
    assert [job.name for job in sql_board.iterjobs()] == [flow_id]


def test_without_a_session_the_intent_is_written_and_marked_too(database, sql_board,
                                                                sql_backend, submitter):
    flow_id = submitter("toy-linear", {"count": 1})
    assert _intent(database, flow_id).materialized_at is not None
    assert submitter("toy-linear", {"count": 1}, flow_id=flow_id) == flow_id
    assert [job.name for job in sql_board.iterjobs()] == [flow_id]


def test_a_plain_submit_callable_is_called_once_the_rows_are_committed(database):
    seen = []

    def plain(flow_name, flow_kwargs, **options):
        with database.session() as session:  # would wait on SQLite's lock inside
            seen.append((flow_name, options, session.get(Fence, "domain-row") is not None))
        return "flow"

    submit = intents.joining(plain)
    with database.session() as session:
        _row(session)
        submit("toy-linear", {"count": 1}, flow_id="f-1", session=session)
        assert seen == []
    assert seen == [("toy-linear", {"flow_id": "f-1"}, True)]
    with pytest.raises(RuntimeError), database.session() as session:
        submit("toy-linear", {"count": 1}, session=session)
        raise RuntimeError("rolled back")
    assert len(seen) == 1


def test_jobs_table_keeps_one_row_per_post(database, sql_board, submitter):
    flow_id = submitter("toy-linear", {"count": 1})
    with database.session() as session:
        names = session.scalars(sa.select(JobRow.name)).all()
    assert names == [flow_id]


def test_work_after_the_commit_runs_once_the_connection_is_back_in_the_pool(tmp_path):
    # Under concurrent requests a hook holding its session's connection while
    # asking for another one exhausted the pool: here it holds one in all.
    from sqlalchemy import orm

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'one.db'}", poolclass=sa.pool.QueuePool,
                              pool_size=1, max_overflow=0, pool_timeout=1)
    ran = []

    def needs_a_connection():
        with engine.connect() as conn:
            ran.append(conn.execute(sa.text("SELECT 1")).scalar())

    with orm.Session(engine) as session, session.begin():
        session.execute(sa.text("SELECT 1"))
        intents.on_commit(session, needs_a_connection)
    assert ran == [1]
    engine.dispose()
