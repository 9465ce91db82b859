"""The TaskFlow persistence backend (logbooks, flow and atom details) of a process.

Everything in fleetflow reaches TaskFlow's persistence through
:func:`get_backend`, so the backend can be swapped in one place. Today it is
TaskFlow's stock SQLAlchemy backend on the fleetflow database itself (its
``logbooks`` / ``flowdetails`` / ``atomdetails`` tables sit beside ours),
running on fleetflow's own SQLAlchemy engine so SQLite gets WAL, a busy
timeout and ``BEGIN IMMEDIATE`` and PostgreSQL gets psycopg 3 and a pool;
``memory://`` gives TaskFlow's in-memory backend (tests).

The schema is created once per process and URL (STYLE.md point 11), and with
``create_all`` on every dialect: TaskFlow's own alembic chain would share the
``alembic_version`` table with fleetflow's branches on PostgreSQL and fail.
"""

from __future__ import annotations

import contextlib
import threading

import sqlalchemy as sa
from taskflow.persistence import backends as tf_backends
from taskflow.persistence.backends.sqlalchemy import tables as tf_tables

from fleetflow.persistence.db import get_database

MEMORY_URLS = ("memory://", "memory:")

_lock = threading.Lock()
_backends: dict[str, object] = {}


def _is_memory(url: str) -> bool:
    return url.strip().lower() in MEMORY_URLS


def create_schema(engine: sa.Engine) -> None:
    """Create TaskFlow's logbook tables on ``engine`` if they are missing."""
    metadata = sa.MetaData()
    tf_tables.fetch(metadata)
    with engine.begin() as conn:
        metadata.create_all(bind=conn, checkfirst=True)


def get_backend(conf, url: str | None = None):
    """The process-wide TaskFlow persistence backend for ``conf``.

    ``url`` overrides ``conf.database.connection`` (tests pass ``memory://``).
    The same object is returned for the same URL, which matters for the
    in-memory backend: conductor threads and the submitter must share it.
    """
    url = url or conf.database.connection
    with _lock:
        backend = _backends.get(url)
        if backend is not None:
            return backend
        if _is_memory(url):
            backend = tf_backends.fetch({"connection": "memory://"})
        else:
            engine = get_database(conf).engine
            create_schema(engine)
            backend = tf_backends.fetch({"connection": url}, engine=engine)
        with contextlib.closing(backend.get_connection()) as conn:
            conn.validate()
        _backends[url] = backend
        return backend


def forget_backends() -> None:
    """Drop the cached backends (tests that reuse a URL with a new database)."""
    with _lock:
        for backend in _backends.values():
            backend.close()
        _backends.clear()
