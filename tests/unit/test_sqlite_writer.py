"""A process's SQLite writers take turns on an in-process gate, held exactly per transaction."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from fleetflow.persistence import sqlite_writer
from fleetflow.persistence.db import Database
from fleetflow.persistence.logbook.checkpoint import AtomCheckpoint

THREADS = 16
WRITES = 25


@pytest.fixture
def database(url):
    db = Database(url)
    with db.session() as session:
        session.execute(sa.text("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)"))
        session.execute(sa.text("INSERT INTO counter VALUES (1, 0)"))
    yield db
    db.dispose()


def gate_holder(database):
    gate = sqlite_writer.gate_of(database.engine)
    return gate._holder if gate._lock.locked() else None


def test_a_writing_session_holds_the_gate_until_it_commits(database):
    with database.session() as session:
        session.execute(sa.text("UPDATE counter SET n = n + 1"))
        holder = gate_holder(database)
        assert holder is session.connection().connection.dbapi_connection
    assert gate_holder(database) is None


def test_rollback_and_invalidation_give_the_gate_back(database):
    with pytest.raises(RuntimeError), database.session() as session:
        session.execute(sa.text("UPDATE counter SET n = n + 1"))
        raise RuntimeError("roll back")
    assert gate_holder(database) is None

    with database.engine.connect() as connection:
        connection.begin()
        connection.execute(sa.text("UPDATE counter SET n = n + 1"))
        assert gate_holder(database) is not None
        connection.invalidate()
    assert gate_holder(database) is None
    with database.session() as session:  # usable afterwards
        assert session.execute(sa.text("SELECT n FROM counter")).scalar() == 0


def test_readers_do_not_take_the_gate(database):
    with database.read_session() as session:
        assert session.execute(sa.text("SELECT n FROM counter")).scalar() == 0
        assert gate_holder(database) is None


def test_concurrent_writers_all_land(database):
    start = threading.Barrier(THREADS)
    errors: list = []

    def writer():
        try:
            start.wait()
            for _ in range(WRITES):
                with database.transaction() as connection:
                    n = connection.execute(sa.text("SELECT n FROM counter")).scalar()
                    connection.execute(sa.text("UPDATE counter SET n = :n"), {"n": n + 1})
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with database.read_session() as session:
        # Read-modify-write without lost updates: every transaction ran alone.
        assert session.execute(sa.text("SELECT n FROM counter")).scalar() == THREADS * WRITES
    assert gate_holder(database) is None


def test_the_raw_checkpoint_path_takes_and_gives_back_the_gate(database, monkeypatch):
    checkpoint = AtomCheckpoint(database.engine)
    seen: list = []
    stock_run = AtomCheckpoint._run

    def run(self, raw, args):
        seen.append(gate_holder(database) is raw.dbapi_connection)
        return stock_run(self, raw, args)

    monkeypatch.setattr(AtomCheckpoint, "_run", run)
    nobody = {"b_uuid": "no-such-atom", **dict.fromkeys(AtomCheckpoint.COLUMNS)}
    assert checkpoint.many([nobody, dict(nobody)]) == 0
    assert seen == [True]
    assert gate_holder(database) is None


def test_a_writer_goes_on_to_sqlite_when_the_gate_is_not_given_back(database, monkeypatch):
    gate = sqlite_writer.gate_of(database.engine)
    monkeypatch.setattr(gate, "_timeout", 0.05)
    stray = object()
    gate.acquire(stray)  # a turn nobody gives back (a bug elsewhere)
    try:
        with database.session() as session:
            session.execute(sa.text("UPDATE counter SET n = 7"))
        with database.read_session() as session:
            assert session.execute(sa.text("SELECT n FROM counter")).scalar() == 7
    finally:
        gate.release(stray)
    assert gate_holder(database) is None


def test_one_gate_per_file_and_none_in_memory(url, tmp_path):
    first, second = Database(url), Database(url)
    try:
        assert sqlite_writer.gate_of(first.engine) is sqlite_writer.gate_of(second.engine)
        other = Database(f"sqlite:///{tmp_path / 'other.db'}")
        assert sqlite_writer.gate_of(other.engine) is not sqlite_writer.gate_of(first.engine)
        other.dispose()
        assert sqlite_writer.gate_of(Database("sqlite://").engine) is None
    finally:
        first.dispose()
        second.dispose()
