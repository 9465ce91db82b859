"""The TaskFlow persistence backend (logbooks, flow and atom details) of a process.

Everything in fleetflow reaches TaskFlow's persistence through
:func:`get_backend`, so the backend can be swapped in one place. It is
fleetflow's own logbook backend (persistence/logbook/backend.py: SQLAlchemy
Core, one UPDATE per checkpoint) on the process's shared database engine,
whose ``tf_*`` tables come from fleetflow's migrations (docs/architecture.md,
"Schemas are migrated by their owner": upgraded once at start-up by the
process that owns the database, never here);
``memory://`` gives TaskFlow's in-memory backend (tests).
"""

from __future__ import annotations

import contextlib
import threading

from taskflow.persistence import backends as tf_backends

from fleetflow.engine import taskflow_retry_fix

MEMORY_URLS = ("memory://", "memory:")

_lock = threading.Lock()
_backends: dict[str, object] = {}


def _is_memory(url: str) -> bool:
    return url.strip().lower() in MEMORY_URLS


def get_backend(conf, url: str | None = None):
    """The process-wide TaskFlow persistence backend for ``conf``.

    ``url`` overrides ``conf.database.connection`` (tests pass ``memory://``).
    The same object is returned for the same URL, which matters for the
    in-memory backend: conductor threads and the submitter must share it.
    """
    # Every flow detail this process reads (a conductor taking over a job,
    # status, operator actions) must decode retry histories right, or a flow
    # resumed after a failed attempt runs on a failure's dict as its host.
    taskflow_retry_fix.apply()
    url = url or conf.database.connection
    with _lock:
        backend = _backends.get(url)
        if backend is not None:
            return backend
        if _is_memory(url):
            backend = tf_backends.fetch({"connection": "memory://"})
        else:
            from fleetflow.engine.engines import logbook_backend

            backend = logbook_backend(conf)
        with contextlib.closing(backend.get_connection()) as conn:
            conn.validate()
        _backends[url] = backend
        return backend

