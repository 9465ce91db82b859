"""One SQLite writer at a time per process, queued on a lock instead of on SQLite's.

SQLite lets one transaction write at a time; the others wait in its busy
handler, which sleeps and retries (1, 2, 5 ... up to 100 ms between tries,
each retry a round of system calls). With hundreds of threads writing at once
(a thousand boots finishing, each recording its instance ACTIVE, while the
engine stores its checkpoints) the process spent more CPU retrying the lock
than writing, and a writer could sleep 100 ms after the lock was free.

So a process's writers to one database file first take a
:class:`WriterGate` (a plain lock, handed over as soon as it is released),
then SQLite's lock, which is then free unless another process holds it; the
busy timeout still covers that. The gate is held from ``BEGIN IMMEDIATE``
until the transaction's COMMIT or ROLLBACK has run (the dialect's
``do_commit`` / ``do_rollback``, which the pool also uses when it resets a
connection), and let go if the connection is closed or invalidated first.
Waiting for the gate is bounded by the busy timeout; after that the writer
goes on to SQLite's lock as before, so a mistake here can slow a writer down
but never deadlock it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref

import sqlalchemy as sa
from sqlalchemy import event

_gates: dict[str, WriterGate] = {}
_gates_lock = threading.Lock()
_by_engine: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class WriterGate:
    """The write turn of one database file in this process."""

    def __init__(self, timeout: float):
        self._lock = threading.Lock()
        self._timeout = timeout
        self._holder = None  # the DBAPI connection whose transaction holds the turn

    @classmethod
    def for_file(cls, path: str, timeout: float) -> WriterGate:
        key = os.path.realpath(path)
        with _gates_lock:
            gate = _gates.get(key)
            if gate is None:
                gate = _gates[key] = cls(timeout)
            return gate

    def acquire(self, dbapi_conn) -> None:
        if self._lock.acquire(timeout=self._timeout):
            self._holder = dbapi_conn
        # else: go on without the turn; SQLite's own lock still decides.

    def release(self, dbapi_conn) -> None:
        """Give the turn back if ``dbapi_conn``'s transaction holds it."""
        if self._holder is dbapi_conn and dbapi_conn is not None:
            self._holder = None
            self._lock.release()

    @contextlib.contextmanager
    def turn(self, dbapi_conn):
        """Hold the turn for a transaction run on ``dbapi_conn`` directly (no events)."""
        self.acquire(dbapi_conn)
        try:
            yield
        finally:
            self.release(dbapi_conn)


def gate_of(engine: sa.Engine) -> WriterGate | None:
    """The gate of ``engine``'s database file (None: not a gated SQLite file)."""
    return _by_engine.get(engine)


def _dbapi(connection):
    """The DBAPI connection behind a pool fairy (or the DBAPI connection itself)."""
    return getattr(connection, "dbapi_connection", connection)


def install(engine: sa.Engine, path: str, timeout: float) -> WriterGate:
    """Gate ``engine``'s writers; returns the file's gate.

    ``begin_immediate(conn)`` in ``persistence.db`` calls :meth:`WriterGate.acquire`
    before it issues ``BEGIN IMMEDIATE``; this wires up the releases.
    """
    gate = WriterGate.for_file(path, timeout)
    _by_engine[engine] = gate
    dialect = engine.dialect
    stock_commit, stock_rollback = dialect.do_commit, dialect.do_rollback

    def do_commit(dbapi_connection):
        try:
            stock_commit(dbapi_connection)
        finally:
            gate.release(_dbapi(dbapi_connection))

    def do_rollback(dbapi_connection):
        try:
            stock_rollback(dbapi_connection)
        finally:
            gate.release(_dbapi(dbapi_connection))

    dialect.do_commit = do_commit
    dialect.do_rollback = do_rollback

    @event.listens_for(engine, "close")
    def _on_close(dbapi_connection, _record):
        gate.release(dbapi_connection)

    @event.listens_for(engine, "invalidate")
    def _on_invalidate(dbapi_connection, _record, _exception):
        gate.release(dbapi_connection)

    return gate
