"""The process's threads for the members of group tasks (a reservation's
instances, a vcluster's servers and volumes).

One pool for every group the process runs, so a thousand members waiting on
their boots hold as many threads as a thousand boot atoms would, and no more.
Groups run on the engine's own threads, never on these: a group waiting on
its members cannot starve them.
"""

from __future__ import annotations

import os
import threading
from concurrent import futures

from fleetflow.flows import runtime

_pool_lock = threading.Lock()
_pool: futures.ThreadPoolExecutor | None = None


def member_pool() -> futures.ThreadPoolExecutor:
    """The pool, of at most ``[conductor] engine_workers`` threads."""
    global _pool
    with _pool_lock:
        if _pool is None:
            conf = runtime.get().conf
            workers = conf.conductor.engine_workers if conf is not None else 1024
            _pool = futures.ThreadPoolExecutor(max_workers=workers,
                                               thread_name_prefix="members")
        return _pool


def _forget_pool() -> None:
    # A forked child has none of its parent's threads.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def run_all(work, items) -> list:
    """``work(item)`` for every item on the member pool; their results in order.

    Waits for every one before raising the first failure: a member still
    running when the group's revert starts would race it.
    """
    pending = _ended(work, items)
    for _item, future in pending:
        if future.exception() is not None:
            raise future.exception()
    return [future.result() for _item, future in pending]


def failures(work, items) -> dict:
    """``work(item)`` for every item on the member pool: ``{item: its error}`` of
    those that failed, once every one has ended (items hashable)."""
    return {item: future.exception() for item, future in _ended(work, items)
            if future.exception() is not None}


def _ended(work, items) -> list[tuple]:
    """``(item, future)`` of ``work(item)`` on the member pool, once every one has ended."""
    pending = [(item, member_pool().submit(work, item)) for item in items]
    futures.wait([future for _item, future in pending])
    return pending
