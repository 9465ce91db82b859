"""Read-only sessions on SQLite: a snapshot that neither takes nor waits for the write lock."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from fleetflow.persistence.db import SQLITE_CONNECTIONS, Database


def test_a_read_session_reads_while_a_writer_holds_the_lock(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/t.db")
    with db.session() as session:
        session.execute(sa.text("CREATE TABLE t (v INTEGER)"))
        session.execute(sa.text("INSERT INTO t VALUES (1)"))
    with db.session() as writer:
        writer.execute(sa.text("UPDATE t SET v = 2"))
        # The writer holds BEGIN IMMEDIATE; a writing session would wait here.
        with db.read_session() as reader:
            assert reader.execute(sa.text("SELECT v FROM t")).scalar() == 1
    with db.read_session() as reader:
        assert reader.execute(sa.text("SELECT v FROM t")).scalar() == 2
    db.dispose()


def test_a_writing_session_still_takes_the_write_lock_up_front(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/t.db")
    with db.session() as session:
        session.execute(sa.text("CREATE TABLE t (v INTEGER)"))
    other = sa.create_engine(f"sqlite:///{tmp_path}/t.db",
                             connect_args={"timeout": 0, "isolation_level": None})
    with db.session() as writer, other.connect() as conn:
        writer.execute(sa.text("SELECT 1"))  # BEGIN IMMEDIATE already ran
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except sa.exc.OperationalError as exc:
            assert "locked" in str(exc)
        else:
            raise AssertionError("a second writer got the lock")
    other.dispose()
    db.dispose()


def test_a_core_transaction_commits_or_rolls_back_as_one(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/t.db")
    with db.transaction() as conn:
        conn.execute(sa.text("CREATE TABLE t (v INTEGER)"))
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
    try:
        with db.transaction() as conn:
            conn.execute(sa.text("UPDATE t SET v = 2"))
            raise RuntimeError("undo")
    except RuntimeError:
        pass
    with db.read_session() as reader:
        assert reader.execute(sa.text("SELECT v FROM t")).scalar() == 1
    db.dispose()


def test_a_sqlite_database_keeps_every_connection_it_opened(tmp_path):
    """Threads that read at once each take a connection; once they are back, the next
    round opens none (each new SQLite connection parses the whole schema again)."""
    db = Database(f"sqlite:///{tmp_path}/t.db")
    db.upgrade()
    opened = []
    sa.event.listen(db.engine, "connect", lambda *_args: opened.append(1))
    threads = 8
    together = threading.Barrier(threads)

    def read():
        with db.read_session() as session:
            session.execute(sa.text("SELECT count(*) FROM instances")).scalar()
            together.wait(timeout=30)  # every thread holds its connection at once

    rounds = []
    for _ in range(2):
        before = len(opened)
        workers = [threading.Thread(target=read) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        rounds.append(len(opened) - before)
    db.dispose()
    assert threads <= SQLITE_CONNECTIONS
    assert rounds[1] == 0 and rounds[0] <= threads
