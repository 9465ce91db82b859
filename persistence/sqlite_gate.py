"""One writer at a time per SQLite file within a process, queued on a lock.

SQLite has one write lock per database file. A writer that finds it taken
waits in SQLite's busy handler, which sleeps and retries with growing naps
(1, 2, 5, 10 ... 100 ms) instead of being woken when the lock frees. When a
thousand boots store their rows while the engine writes its checkpoints,
those naps add up on the engine thread: 0.2-0.3 s of a 1,000-instance
reservation's completions went to them, with the lock free most of the time.

So each process queues its own writers of a file on a :class:`WriteGate`
before they ask SQLite for the lock: the next one is woken the moment the
previous one commits or rolls back. SQLite's busy timeout still arbitrates
between processes. Nothing else changes: the gate is held exactly while the
process holds (or waits for) SQLite's write lock, from ``BEGIN IMMEDIATE`` to
the end of the transaction, and a writer that cannot get it within the busy
timeout fails as SQLite would ("database is locked").
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref

import sqlalchemy as sa


class WriteGate:
    """The process's queue for one SQLite file's write lock.

    Held by a DBAPI connection (not a thread): the transaction may end in
    another thread, as when the pool rolls back a connection it gets back.
    """

    def __init__(self, timeout: float):
        self._timeout = timeout
        self._lock = threading.Lock()
        self._owner = None

    def enter(self, dbapi_connection) -> None:
        if not self._lock.acquire(timeout=self._timeout):
            raise sqlite3.OperationalError("database is locked")
        self._owner = dbapi_connection

    def leave(self, dbapi_connection) -> None:
        """Release the gate if ``dbapi_connection`` holds it (any other call is a no-op)."""
        if self._owner is dbapi_connection and dbapi_connection is not None:
            self._owner = None
            self._lock.release()

    @contextlib.contextmanager
    def held(self, dbapi_connection):
        """Hold the gate around a write made on a raw connection."""
        self.enter(dbapi_connection)
        try:
            yield
        finally:
            self.leave(dbapi_connection)


_FILE_GATES: dict[str, WriteGate] = {}
_GATES_LOCK = threading.Lock()
_ENGINE_GATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _dbapi(connection):
    """The sqlite3 connection behind a pool proxy (or the connection itself)."""
    return getattr(connection, "dbapi_connection", connection)


def install(engine: sa.Engine, timeout: float) -> WriteGate:
    """Give ``engine`` (SQLite) its file's gate, released when a transaction ends.

    Engines on the same file share one gate. The release hooks wrap the
    dialect's commit and rollback, which is where every transaction of the
    engine ends, the pool's rollback of a returned connection included.
    """
    database = engine.url.database
    with _GATES_LOCK:
        if database in (None, "", ":memory:"):
            gate = WriteGate(timeout)  # a memory database is its engine's own
        else:
            gate = _FILE_GATES.setdefault(os.path.abspath(database), WriteGate(timeout))
        _ENGINE_GATES[engine] = gate
    dialect = engine.dialect
    stock_commit, stock_rollback = dialect.do_commit, dialect.do_rollback

    def do_commit(dbapi_connection):
        try:
            stock_commit(dbapi_connection)
        finally:
            gate.leave(_dbapi(dbapi_connection))

    def do_rollback(dbapi_connection):
        try:
            stock_rollback(dbapi_connection)
        finally:
            gate.leave(_dbapi(dbapi_connection))

    dialect.do_commit = do_commit
    dialect.do_rollback = do_rollback
    return gate


def gate_of(engine: sa.Engine) -> WriteGate | None:
    """The gate of ``engine``'s SQLite file; None for other databases."""
    return _ENGINE_GATES.get(engine)


def begin_immediate(connection: sa.Connection) -> None:
    """``BEGIN IMMEDIATE`` on ``connection``, queued behind the process's other writers."""
    gate = gate_of(connection.engine)
    dbapi_connection = _dbapi(connection.connection)
    if gate is not None:
        gate.enter(dbapi_connection)
    try:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    except BaseException:
        if gate is not None:
            gate.leave(dbapi_connection)
        raise
