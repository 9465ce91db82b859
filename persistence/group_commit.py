"""Group commit: small writes from many threads stored together, one transaction a batch.

A thousand boots ending within a second each write their instance row. One
transaction each means a thousand rounds of SQLite's single write lock (or a
thousand PostgreSQL commits), every one fought over by the engine's own
checkpoints. Here the first writer to arrive becomes the *leader*: it takes
everything queued so far, itself included, writes it in one transaction and
wakes each writer of the batch; a writer that arrived meanwhile leads the next
batch. Nobody waits on a timer, so a lone writer pays nothing for it.

:meth:`GroupCommit.write` returns only once its item is committed (a task that
returns before its row is stored could lose the row in a crash, and resume
would not run the task again). When a batch fails, each of its writers writes
its own item on its own, so one bad item fails only its own writer.

A lost database connection is not a bad item: the leader runs its batch
again, with backoff, within the database's outage window (``retrying``,
by default that of the Database whose ``transaction`` or ``session`` is
given), while later writers keep queueing for the next batch. Once the
window is over every writer of the batch gets ``DatabaseUnavailable``;
writing each item alone would only wait the window again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from fleetflow.persistence.db_retry import DatabaseUnavailable

_RETRY_ALONE = object()


class _Entry:
    __slots__ = ("item", "done", "leads", "outcome")

    def __init__(self, item):
        self.item = item
        self.done = threading.Event()
        self.leads = False
        self.outcome: Any = None


class GroupCommit:
    """Commit ``apply(connection, items)`` for batches of items written by many threads.

    ``transaction`` is a context manager factory giving a connection inside
    one transaction (``Database.transaction``); ``apply`` must write every
    item it is given, be correct for a batch of one, and store the same when
    run twice (a commit whose answer the outage lost is run again).
    ``retrying(fn, what)`` runs ``fn`` through outages (``Database.retrying``);
    by default the one of ``transaction``'s Database, if it is bound to one.
    """

    def __init__(self, transaction: Callable, apply: Callable[[Any, Sequence], None],
                 retrying: Callable | None = None):
        self._transaction = transaction
        self._apply = apply
        if retrying is None:
            retrying = getattr(getattr(transaction, "__self__", None), "retrying", None)
        self._retrying = retrying if callable(retrying) else None
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._leading = False
        self.batches = 0

    def write(self, item) -> None:
        """Store ``item``; returns once it is committed, raises what its write raised."""
        entry = _Entry(item)
        with self._lock:
            self._queue.append(entry)
            entry.leads = not self._leading
            self._leading = True
        if not entry.leads:
            entry.done.wait()
        if entry.leads:
            self._lead()
        if entry.outcome is _RETRY_ALONE:
            self._commit([item], "writing one item")
        elif entry.outcome is not None:
            raise entry.outcome

    def _commit(self, items: list, what: str) -> None:
        def commit():
            with self._transaction() as connection:
                self._apply(connection, items)

        if self._retrying is None:
            commit()
        else:
            self._retrying(commit, what)

    def _lead(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
        outcome: Any = _RETRY_ALONE
        try:
            self._commit([entry.item for entry in batch],
                         f"writing a batch of {len(batch)}")
            outcome = None
        except DatabaseUnavailable as exc:
            outcome = exc
        except Exception as exc:
            if len(batch) == 1:
                outcome = exc
        finally:
            # Whatever happened, the batch's writers and the next leader must wake.
            self.batches += 1
            with self._lock:
                successor = self._queue[0] if self._queue else None
                if successor is None:
                    self._leading = False
                else:
                    successor.leads = True
            for entry in batch:
                entry.outcome = outcome
                entry.done.set()
            if successor is not None:
                successor.done.set()
