"""Waiting out a database outage: disconnects retried with backoff, for a while.

A PostgreSQL restart or failover breaks every pooled connection and refuses
new ones for a few seconds. Without help, the first write that meets it fails
its task, the engine reverts work that was fine, and recording that fails
too. So writes that meet a *disconnect* (:func:`is_disconnect`) run again,
after a pause that starts at ``[database] retry_interval`` and doubles up to
:data:`MAX_INTERVAL`, until they succeed or ``[database] max_retry_seconds``
have passed since the first failure (:func:`retrying`). Only then does
:class:`DatabaseUnavailable` surface. The pool recovers by itself: PostgreSQL
engines ping a connection before lending it (``pool_pre_ping``), and a
disconnect seen by SQLAlchemy discards the whole pool.

Retries nest (a task re-run around a group commit around a transaction) but
share one deadline per thread: an inner retry never waits past the outer
one's, and :class:`DatabaseUnavailable` is never retried, so an outage costs
one window, not one per level.

**What the engine does with it.** A task that raises makes TaskFlow record
its FAILURE and then resolve it: revert the flow, or let a retry controller
revert the instance's chain and try elsewhere. Nothing in stock TaskFlow lets
a task's exception stop the engine without that, and TaskFlow's conductor
consumes a job whose engine reverted. Retrying inside the task for as long as
the conductor's claim lasts would avoid the revert but tie a task to a lease
that, on the SQL jobboard, expires with the very database it waits for. So:

1. a task that meets a disconnect is re-run, whole, within the window
   (``flows.tasks.base``); every fleetflow task is idempotent by design;
2. once the window is over it raises :class:`DatabaseUnavailable`, and the
   engine's checkpoint buffer *withholds* that outcome
   (``plugin.checkpoints``): saving it fails, so TaskFlow
   neither records the FAILURE nor resolves it, the engine stops with this
   error, and the flow's own FAILURE is withheld too;
3. :class:`DatabaseUnavailable` is an ``ExecutionFailure``, one of TaskFlow's
   conductor's "do not consume" errors: the job is abandoned, the atom stays
   RUNNING in the logbook and whoever resumes the flow runs it again.

It is not a ``StorageFailure`` (the other "do not consume" error) because
TaskFlow's storage retries those three times, five seconds apart, around
every save: after a closed window that adds nothing but delay, and each
withheld task failure would cost the engine thread ten seconds.

SQLite has no server to lose. Its "database is locked" is contention, already
waited for by the busy timeout (``persistence.db``) and retried where it
matters (the placement store); it is not a disconnect here.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import exc as sa_exc
from taskflow import exceptions as tf_exc

LOG = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_RETRY_SECONDS = 120.0
DEFAULT_RETRY_INTERVAL = 0.5
MAX_INTERVAL = 5.0

_SQLITE_MODULES = ("sqlite3", "_sqlite3", "pysqlite2")
_BUSY = ("database is locked", "database is busy", "database table is locked")


class DatabaseUnavailable(tf_exc.ExecutionFailure):
    """The database stayed unreachable for the whole retry window.

    Means "stop, do not consume, do not revert": see the module docstring.
    """


def _is_sqlite(error: BaseException) -> bool:
    return type(error).__module__.split(".")[0] in _SQLITE_MODULES


def _raw_disconnect(error: BaseException) -> bool:
    """A DBAPI (PEP 249) error, not wrapped by SQLAlchemy, that means a lost server.

    The logbook's checkpoints run on raw pooled connections and meet these.
    """
    if _is_sqlite(error):
        return False
    names = {cls.__name__ for cls in type(error).__mro__}
    if "Error" not in names:
        return False
    if "OperationalError" in names:
        return True
    return "InterfaceError" in names and "closed" in str(error).lower()


def _dbapi_disconnect(error: sa_exc.DBAPIError) -> bool:
    if error.connection_invalidated:
        return True
    orig = error.orig
    if orig is not None and _is_sqlite(orig):
        return False
    if any(text in str(orig).lower() for text in _BUSY):
        return False
    if isinstance(error, sa_exc.OperationalError):
        return True
    return isinstance(error, sa_exc.InterfaceError) and "closed" in str(orig).lower()


def is_disconnect(error: BaseException) -> bool:
    """True when ``error`` means the database server is out of reach (for now).

    SQLAlchemy's invalidated connections and ``OperationalError`` class, its
    ``DisconnectionError``, an ``InterfaceError`` on a closed connection; the
    same DBAPI errors raw; and any of these as the cause of a TaskFlow
    ``StorageFailure`` (the logbook backend wraps them so). Never SQLite's
    busy database, never :class:`DatabaseUnavailable` (its window is over).
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, DatabaseUnavailable):
            return False
        if isinstance(error, sa_exc.DBAPIError):
            return _dbapi_disconnect(error)
        if isinstance(error, sa_exc.DisconnectionError):
            return True
        if isinstance(error, tf_exc.StorageFailure):
            error = error.cause or error.__cause__
            continue
        return _raw_disconnect(error)
    return False


# SQLite errors that mean the file cannot serve now, rather than a bad statement.
_SQLITE_UNAVAILABLE = ("unable to open database file", "disk i/o error", *_BUSY)


def is_unavailable(error: BaseException) -> bool:
    """True when ``error`` means the database cannot serve at the moment: a
    disconnect (:func:`is_disconnect`), a retry window that closed on one
    (:class:`DatabaseUnavailable`), or a SQLite file that cannot be opened or
    stayed locked past the busy timeout. What a caller should try again later.
    """
    if isinstance(error, DatabaseUnavailable) or is_disconnect(error):
        return True
    if isinstance(error, sa_exc.OperationalError) and error.orig is not None:
        error = error.orig
    return (_is_sqlite(error) and type(error).__name__ == "OperationalError"
            and any(text in str(error).lower() for text in _SQLITE_UNAVAILABLE))


class Outage:
    """Whether a database is failing now: one warning when it starts, one when it ends."""

    def __init__(self, name: str = "database"):
        self.name = name
        self._lock = threading.Lock()
        self._since: float | None = None

    def failed(self, what: str, error: BaseException, max_seconds: float) -> None:
        with self._lock:
            first, self._since = self._since is None, self._since or time.monotonic()
        if first:
            LOG.warning("%s unreachable while %s (%s): retrying for up to %.0f s",
                        self.name, what, _first_line(error), max_seconds)
        else:
            LOG.debug("%s still unreachable while %s: %s", self.name, what,
                      _first_line(error))

    def recovered(self) -> None:
        if self._since is None:
            return
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            LOG.warning("%s reachable again after %.1f s", self.name,
                        time.monotonic() - since)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


_local = threading.local()


def retrying(fn: Callable[[], T], *, max_seconds: float, interval: float, what: str,
             max_interval: float = MAX_INTERVAL, outage: Outage | None = None) -> T:
    """``fn()``, run again while it fails with a disconnect, for up to ``max_seconds``.

    The window opens at the first failure (a call that succeeds pays nothing)
    and never outlasts an enclosing :func:`retrying` of the same thread.
    After it, :class:`DatabaseUnavailable` is raised from the last error.
    Other errors pass through at once.
    """
    outage = outage or Outage()
    deadline: float | None = None
    started = 0.0
    delay = interval
    while True:
        outer = getattr(_local, "deadline", None)
        if deadline is not None:
            _local.deadline = deadline if outer is None else min(outer, deadline)
        try:
            result = fn()
        except Exception as error:
            if not is_disconnect(error):
                raise
            now = time.monotonic()
            if deadline is None:
                started, deadline = now, now + max_seconds
                if outer is not None:
                    deadline = min(deadline, outer)
                outage.failed(what, error, max(0.0, deadline - now))
            if now >= deadline:
                LOG.warning("%s still unreachable: giving up %s", outage.name, what)
                raise DatabaseUnavailable(
                    f"{outage.name} unreachable for {now - started:.1f} s while {what}: "
                    f"{_first_line(error)}", cause=error) from error
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, max_interval)
        else:
            if deadline is not None:
                outage.recovered()
            return result
        finally:
            _local.deadline = outer


class RetryPolicy:
    """A database's retry window and its outage log, shared by all its writers."""

    def __init__(self, max_seconds: float = DEFAULT_MAX_RETRY_SECONDS,
                 interval: float = DEFAULT_RETRY_INTERVAL, max_interval: float = MAX_INTERVAL,
                 name: str = "database"):
        self.max_seconds = float(max_seconds)
        self.interval = float(interval)
        self.max_interval = max(float(max_interval), self.interval)
        self.outage = Outage(name)

    @classmethod
    def from_conf(cls, conf, name: str = "database") -> RetryPolicy:
        """``conf``'s ``[database]`` window; defaults for what it lacks (test stand-ins)."""
        group = getattr(conf, "database", None)
        return cls(_number(group, "max_retry_seconds", DEFAULT_MAX_RETRY_SECONDS),
                   _number(group, "retry_interval", DEFAULT_RETRY_INTERVAL), name=name)

    def run(self, fn: Callable[[], T], what: str) -> T:
        return retrying(fn, max_seconds=self.max_seconds, interval=self.interval, what=what,
                        max_interval=self.max_interval, outage=self.outage)


def _number(group, option: str, default: float) -> float:
    value = getattr(group, option, default)
    return float(value) if isinstance(value, (int, float)) else default


# Engines shared by several users (the logbook backend runs on the process's
# Database engine) find the policy their Database was configured with.
_policies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_policies_lock = threading.Lock()


def register(engine, policy: RetryPolicy) -> None:
    with _policies_lock:
        _policies[engine] = policy


def policy_for(engine) -> RetryPolicy:
    """The policy registered for ``engine``; a default one (registered now) otherwise."""
    with _policies_lock:
        policy = _policies.get(engine)
        if policy is None:
            policy = _policies[engine] = RetryPolicy()
        return policy
