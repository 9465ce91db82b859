"""persistence/db_retry.py: which errors are outages, and how long they are waited out."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time

import psycopg
import pytest
import sqlalchemy as sa
from taskflow import exceptions as tf_exc
from taskflow.conductors.backends import impl_executor
from taskflow.persistence import models

from fleetflow.engine.fencing import FencedBackend
from fleetflow.persistence import db_retry
from fleetflow.persistence.db import Database, create_engine
from fleetflow.persistence.db_retry import DatabaseUnavailable, is_disconnect, retrying
from fleetflow.persistence.group_commit import GroupCommit
from fleetflow.persistence.logbook.backend import LogbookBackend

FAST = {"max_seconds": 5.0, "interval": 0.01}


def disconnect(text="server closed the connection unexpectedly"):
    """What SQLAlchemy raises when PostgreSQL goes away under a statement."""
    return sa.exc.OperationalError("UPDATE x", None, Exception(text),
                                   connection_invalidated=True)


class Flaky:
    """Calls ``fn``, but the first ``failures`` calls raise ``error()`` instead."""

    def __init__(self, fn=lambda *a, **k: "done", failures=2, error=disconnect):
        self.fn, self.failures, self.error, self.calls = fn, failures, error, 0
        self._lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        with self._lock:
            self.calls += 1
            failing = self.calls <= self.failures
        if failing:
            raise self.error()
        return self.fn(*args, **kwargs)


# -- what is a disconnect ---------------------------------------------------------

@pytest.mark.parametrize("error", [
    disconnect(),
    sa.exc.OperationalError("SELECT 1", None, Exception("connection refused")),
    sa.exc.DisconnectionError("pre-ping failed"),
    sa.exc.InterfaceError("SELECT 1", None, Exception("the connection is closed")),
    sa.exc.DBAPIError("SELECT 1", None, Exception("x"), connection_invalidated=True),
    psycopg.OperationalError("terminating connection due to administrator command"),
    psycopg.InterfaceError("the connection is closed"),
], ids=repr)
def test_lost_servers_are_disconnects(error):
    assert is_disconnect(error)


def test_a_storage_failure_caused_by_a_disconnect_is_one():
    # The logbook's atom checkpoint wraps the driver's error so.
    try:
        try:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        except psycopg.Error:
            tf_exc.raise_with_cause(tf_exc.StorageFailure, "Failed writing a checkpoint")
    except tf_exc.StorageFailure as failure:
        assert is_disconnect(failure)


@pytest.mark.parametrize("error", [
    # SQLite's busy database is contention, waited for by the busy timeout.
    sa.exc.OperationalError("UPDATE x", None, sqlite3.OperationalError("database is locked")),
    sa.exc.OperationalError("UPDATE x", None, Exception("database is locked")),
    sqlite3.OperationalError("database is locked"),
    sa.exc.IntegrityError("INSERT x", None, Exception("duplicate key")),
    sa.exc.InterfaceError("SELECT 1", None, Exception("bad parameter")),
    tf_exc.StorageFailure("no cause"),
    tf_exc.NotFound("no row"),
    ValueError("not a database error"),
    DatabaseUnavailable("the window is over already"),
], ids=repr)
def test_other_errors_are_not(error):
    assert not is_disconnect(error)


def test_an_exhausted_outage_is_not_consumed_by_taskflow_conductors():
    assert issubclass(DatabaseUnavailable, impl_executor.ExecutorConductor.NO_CONSUME_EXCEPTIONS)
    # Not a StorageFailure: TaskFlow's storage would retry it 3 x 5 s per save.
    assert not issubclass(DatabaseUnavailable, tf_exc.StorageFailure)


# -- retrying ----------------------------------------------------------------------

def test_a_disconnect_is_retried_until_it_succeeds(caplog):
    flaky = Flaky(failures=3)
    with caplog.at_level(logging.WARNING, logger=db_retry.__name__):
        assert retrying(flaky, what="testing", **FAST) == "done"
    assert flaky.calls == 4
    warnings = [r.getMessage() for r in caplog.records]
    # One warning when the outage starts, one when it ends: not one per attempt.
    assert len(warnings) == 2, warnings
    assert "unreachable while testing" in warnings[0]
    assert "reachable again" in warnings[1]


def test_other_errors_pass_through_at_once():
    flaky = Flaky(failures=1, error=lambda: sa.exc.IntegrityError("x", None, Exception("dup")))
    with pytest.raises(sa.exc.IntegrityError):
        retrying(flaky, what="testing", **FAST)
    assert flaky.calls == 1


def test_after_the_window_the_last_error_surfaces_as_database_unavailable():
    flaky = Flaky(failures=10**6)
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as raised:
        retrying(flaky, what="testing", max_seconds=0.3, interval=0.01, max_interval=0.05)
    assert 0.3 <= time.monotonic() - started < 2
    assert isinstance(raised.value.__cause__, sa.exc.OperationalError)
    assert flaky.calls > 3  # backoff, not one attempt


def test_backoff_doubles_up_to_its_bound(monkeypatch):
    pauses = []
    monkeypatch.setattr(db_retry.time, "sleep", pauses.append)
    retrying(Flaky(failures=6), what="testing", max_seconds=60, interval=0.5)
    assert pauses == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_nested_retries_share_the_outer_deadline():
    inner = Flaky(failures=10**6)
    calls = []

    def outer():
        calls.append(1)
        if len(calls) == 1:
            raise disconnect()  # the outer window opens here
        return retrying(inner, what="inner", max_seconds=60, interval=0.01,
                        max_interval=0.05)

    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable):
        retrying(outer, what="outer", max_seconds=0.3, interval=0.01)
    # The inner retry stopped at the outer deadline, and its DatabaseUnavailable
    # was not retried again by the outer one.
    assert time.monotonic() - started < 2
    assert len(calls) == 2


def test_zero_seconds_means_no_retry():
    flaky = Flaky(failures=1)
    with pytest.raises(DatabaseUnavailable):
        retrying(flaky, what="testing", max_seconds=0, interval=0.01)
    assert flaky.calls == 1


# -- Database and its users ----------------------------------------------------------

def test_the_window_comes_from_the_configuration(make_conf):
    conf = make_conf(database={"max_retry_seconds": 7.5, "retry_interval": 0.25})
    database = Database.from_conf(conf)
    try:
        assert (database.retry_policy.max_seconds, database.retry_policy.interval) == (7.5, 0.25)
        assert db_retry.policy_for(database.engine) is database.retry_policy
        flaky = Flaky(failures=2)
        database.retry_policy.interval = 0.01
        assert database.retrying(flaky, "testing") == "done"
        assert flaky.calls == 3
    finally:
        database.dispose()


def test_the_defaults_outlast_a_postgresql_restart(conf):
    assert conf.database.max_retry_seconds == 120
    assert conf.database.retry_interval == 0.5


def test_postgresql_engines_ping_pooled_connections():
    engine = create_engine("postgresql://nobody@127.0.0.1:1/none")
    assert engine.pool._pre_ping


def test_a_logbook_checkpoint_is_retried_through_a_disconnect(url):
    backend = LogbookBackend({"connection": url, "retry_interval": 0.01})
    try:
        conn = backend.get_connection()
        conn.upgrade()
        book = models.LogBook("book")
        flow = models.FlowDetail("flow", uuid="f-1")
        atom = models.TaskDetail("atom", uuid="a-1")
        flow.add(atom)
        book.add(flow)
        conn.save_logbook(book)

        def as_checkpoint_raises():
            try:
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            except psycopg.Error:
                tf_exc.raise_with_cause(tf_exc.StorageFailure, "Failed writing a checkpoint")

        real = backend._checkpoint.many  # a lone checkpoint is a batch of one
        for state, save in (("RUNNING", conn.update_atom_details),
                            ("SUCCESS", lambda ad: conn.update_atom_details_many([ad]))):
            flaky = backend._checkpoint.many = Flaky(real, failures=2,
                                                     error=as_checkpoint_raises)
            atom.state = state
            save(atom)
            assert flaky.calls == 3
            assert conn.get_atom_details("a-1").state == state
    finally:
        backend.close()


def test_a_logbook_save_gives_up_after_its_window(url):
    backend = LogbookBackend({"connection": url, "max_retry_seconds": 0.2,
                              "retry_interval": 0.01})
    try:
        conn = backend.get_connection()
        conn.upgrade()
        backend._engine.begin = Flaky(failures=10**6)  # every transaction: disconnect
        with pytest.raises(DatabaseUnavailable):
            conn.save_logbook(models.LogBook("book"))
    finally:
        backend.close()


def test_the_fence_look_up_is_retried(db):
    db.retry_policy.interval = 0.01
    fenced = FencedBackend(backend=None, database=db, fence={"key": "k", "token": 1})
    fenced._read_token = Flaky(lambda: 1, failures=2)
    fenced.check()  # current token 1: not stale, and no error
    assert fenced._read_token.calls == 3


# -- group commit ----------------------------------------------------------------------

class Outage:
    """A transaction factory whose commits fail with a disconnect while ``down``."""

    def __init__(self):
        self.down = threading.Event()
        self.committed: list = []
        self.failed = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def transaction(self):
        pending: list = []
        yield pending
        if self.down.is_set():
            with self._lock:
                self.failed += 1
            raise disconnect()
        with self._lock:
            self.committed.extend(pending)

    @staticmethod
    def apply(connection, items):
        connection.extend(items)


def _write_all(group, items) -> dict:
    outcomes: dict = {}

    def write(item):
        try:
            group.write(item)
            outcomes[item] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            outcomes[item] = exc

    threads = [threading.Thread(target=write, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    return outcomes, threads


def test_a_group_commit_keeps_every_queued_write_through_an_outage():
    outage = Outage()
    policy = db_retry.RetryPolicy(max_seconds=10, interval=0.01, max_interval=0.05)
    group = GroupCommit(outage.transaction, outage.apply, retrying=policy.run)
    outage.down.set()
    outcomes, threads = _write_all(group, list(range(50)))
    deadline = time.monotonic() + 10
    while outage.failed < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    outage.down.clear()
    for thread in threads:
        thread.join(10)
    assert outcomes == {i: "ok" for i in range(50)}
    assert sorted(outage.committed) == list(range(50))  # each once, none lost


def test_a_group_commit_bound_to_a_database_uses_its_window(db):
    group = GroupCommit(db.transaction, lambda connection, items: None)
    assert group._retrying == db.retrying


def test_after_the_window_every_writer_of_the_batch_gets_database_unavailable():
    outage = Outage()
    policy = db_retry.RetryPolicy(max_seconds=0.2, interval=0.01, max_interval=0.05)
    group = GroupCommit(outage.transaction, outage.apply, retrying=policy.run)
    outage.down.set()
    outcomes, threads = _write_all(group, list(range(5)))
    for thread in threads:
        thread.join(10)
    assert set(outcomes) == set(range(5))
    assert all(isinstance(outcome, DatabaseUnavailable) for outcome in outcomes.values())
    assert outage.committed == []


@pytest.mark.parametrize("error, unavailable", [
    (disconnect(), True),
    (DatabaseUnavailable("window closed"), True),
    (sa.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError(
        "unable to open database file")), True),
    (sa.exc.OperationalError("UPDATE hosts", {}, sqlite3.OperationalError(
        "database is locked")), True),
    (sa.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError(
        "no such table: hosts")), False),
    (sa.exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE failed")), False),
    (ValueError("bad"), False),
])
def test_what_a_caller_should_try_again_later(error, unavailable):
    assert db_retry.is_unavailable(error) is unavailable
