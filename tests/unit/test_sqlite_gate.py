"""The process's SQLite writers queue on one gate per file, released when a transaction ends."""

from __future__ import annotations

import sqlite3
import threading

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from fleetflow.persistence import sqlite_gate
from fleetflow.persistence.db import Database
from fleetflow.persistence.logbook.checkpoint import AtomCheckpoint

WAIT_S = 10  # generous: only a broken gate gets anywhere near it


@pytest.fixture
def db(tmp_path):
    """A database whose connections never wait inside SQLite (busy timeout 0).

    A second writer of this process then either waits at the gate or fails
    at once with "database is locked": the gate is the only place to wait.
    """
    database = Database(f"sqlite:///{tmp_path}/t.db")
    event.listen(database.engine, "connect",
                 lambda dbapi_connection, _record: dbapi_connection.execute(
                     "PRAGMA busy_timeout=0"))
    with database.session() as session:
        session.execute(sa.text("CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER)"))
        session.execute(sa.text("INSERT INTO t VALUES (1, 0)"))
    yield database
    database.dispose()


def _free(gate) -> bool:
    """Whether another writer could enter now (without waiting)."""
    if not gate._lock.acquire(blocking=False):
        return False
    gate._lock.release()
    return True


def test_a_writer_waits_for_the_gate_and_enters_when_the_holder_commits(db):
    gate = sqlite_gate.gate_of(db.engine)
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def first():
        with db.session() as session:
            session.execute(sa.text("UPDATE t SET v = 1"))
            holding.set()
            release.wait(WAIT_S)
            order.append("first commits")

    def second():
        holding.wait(WAIT_S)
        with db.session() as session:
            session.execute(sa.text("UPDATE t SET v = v + 10"))
            order.append("second writes")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    holding.wait(WAIT_S)
    assert not _free(gate)
    release.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert order == ["first commits", "second writes"]
    assert _free(gate)
    with db.read_session() as reader:
        assert reader.execute(sa.text("SELECT v FROM t")).scalar() == 11


def test_a_rolled_back_transaction_frees_the_gate(db):
    gate = sqlite_gate.gate_of(db.engine)
    with pytest.raises(RuntimeError), db.transaction() as conn:
        conn.execute(sa.text("UPDATE t SET v = 5"))
        assert not _free(gate)
        raise RuntimeError("undo")
    assert _free(gate)
    with db.transaction() as conn:
        conn.execute(sa.text("UPDATE t SET v = 6"))
    assert _free(gate)


def test_a_connection_returned_without_commit_frees_the_gate(db):
    gate = sqlite_gate.gate_of(db.engine)
    conn = db.engine.connect()
    conn.execute(sa.text("UPDATE t SET v = 7"))  # autobegin: BEGIN IMMEDIATE
    assert not _free(gate)
    conn.close()  # the pool rolls it back
    assert _free(gate)


def test_read_sessions_do_not_take_the_gate(db):
    gate = sqlite_gate.gate_of(db.engine)
    with db.session() as writer:
        writer.execute(sa.text("UPDATE t SET v = 8"))
        with db.read_session() as reader:
            assert reader.execute(sa.text("SELECT v FROM t")).scalar() == 0
        assert not _free(gate)
    assert _free(gate)


def test_engines_on_one_file_share_the_gate(db, tmp_path):
    other = Database(f"sqlite:///{tmp_path}/t.db")
    elsewhere = Database(f"sqlite:///{tmp_path}/other.db")
    try:
        assert sqlite_gate.gate_of(other.engine) is sqlite_gate.gate_of(db.engine)
        assert sqlite_gate.gate_of(elsewhere.engine) is not sqlite_gate.gate_of(db.engine)
    finally:
        other.dispose()
        elsewhere.dispose()


def test_postgres_style_engines_have_no_gate():
    engine = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert sqlite_gate.gate_of(engine) is None


def test_a_writer_that_cannot_enter_in_time_fails_as_sqlite_would():
    gate = sqlite_gate.WriteGate(timeout=0.01)
    holder, waiter = object(), object()
    gate.enter(holder)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        gate.enter(waiter)
    gate.leave(waiter)  # not the holder: nothing happens
    assert not _free(gate)
    gate.leave(holder)
    assert _free(gate)


def test_the_atom_checkpoint_queues_behind_a_session(db):
    from fleetflow.persistence.logbook.models import ATOMDETAILS

    ATOMDETAILS.metadata.create_all(db.engine, tables=[ATOMDETAILS])
    checkpoint = AtomCheckpoint(db.engine)
    assert checkpoint._gate is sqlite_gate.gate_of(db.engine)
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def session_holder():
        with db.session() as session:
            session.execute(sa.text("UPDATE t SET v = 9"))
            holding.set()
            release.wait(WAIT_S)
            order.append("session commits")

    def checkpointer():
        holding.wait(WAIT_S)
        row = {c: None for c in AtomCheckpoint.COLUMNS if c != "updated_at"}
        row["b_uuid"] = "no-such-atom"
        checkpoint.many([row, dict(row)])
        order.append("checkpoint written")

    threads = [threading.Thread(target=session_holder), threading.Thread(target=checkpointer)]
    for thread in threads:
        thread.start()
    holding.wait(WAIT_S)
    release.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert order == ["session commits", "checkpoint written"]
    assert _free(sqlite_gate.gate_of(db.engine))
