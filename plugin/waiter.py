"""The waiter of the fleetflow engine: a completion queue per engine.

Between completions the engine's state machine waits with
``futurist.waiters.wait_for_any(not_done, timeout)``, which is
``concurrent.futures.wait(not_done, return_when=FIRST_COMPLETED)``: every call
sorts the outstanding futures, takes each one's condition, appends a waiter to
each, and once woken takes each condition again to remove it. With N boots
outstanding that is ~2N lock round trips per completion and O(N^2) for a
reservation (about two million for 1,000 instances booting at once), all on
the engine thread that every completion has to pass through.

:class:`CompletionWaiter` (one per engine runtime) keeps a queue instead. Each
future gets one ``add_done_callback`` the first time the waiter sees it; the
callback appends the future to the queue and wakes the engine thread, which
blocks on a single condition until the queue holds at least one of the
futures it waits for. Finding the futures scheduled since the previous wait is
one set difference in C (no locks, no Python-level work per old future);
everything else is O(1) per future over its whole life.

What the caller gets is what ``wait_for_any`` promises: ``(done, not_done)``
with ``done`` a non-empty subset of ``fs`` that completed (empty only when the
timeout passed first), and ``not_done`` the rest of ``fs``. ``not_done`` is the
caller's own set with ``done`` removed (the engine keeps it as its new
``memory.not_done``), which is why the waiter only takes sets: anything else,
and green futures (their callbacks run on the eventlet hub), go to stock
``wait_for_any``. One difference, on purpose: a cancelled future is done as
soon as ``cancel()`` returns (``Future.done()`` says so then), where stock
waits for the executor to dequeue and drop it, which can take as long as the
longest running task when every worker is busy.

The engine's runtime (:mod:`.runtime`) builds its ``MachineBuilder`` with a
waiter of its own, where TaskFlow's passes ``waiters.wait_for_any``.
``tests/unit/test_taskflow_waiter.py`` compares it with stock ``wait_for_any``.
"""

from __future__ import annotations

import threading
import time

import futurist
from futurist import waiters

STOCK_WAIT_FOR_ANY = waiters.wait_for_any


class CompletionWaiter:
    """``wait_for_any`` for one engine: completed futures arrive on a queue.

    Meant for one waiting thread at a time (an engine's run loop); the
    callbacks may come from any number of threads.
    """

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._completed: list = []
        # Futures carrying our callback that were not yet handed back as done.
        self._watched: set = set()
        self._stock_only = False

    def _on_done(self, fut) -> None:
        with self._cond:
            self._completed.append(fut)
            self._cond.notify()

    def _watch(self, fs: set) -> bool:
        """Put a callback on every future of ``fs`` not seen yet; False for green futures."""
        new = fs - self._watched
        if not new:
            return True
        for fut in new:
            if isinstance(fut, futurist.GreenFuture):
                return False
        for fut in new:
            self._watched.add(fut)
            # Calls _on_done at once (in this thread) when already done.
            fut.add_done_callback(self._on_done)
        return True

    def __call__(self, fs, timeout=None) -> waiters.DoneAndNotDoneFutures:
        if self._stock_only or not isinstance(fs, set):
            return STOCK_WAIT_FOR_ANY(fs, timeout=timeout)
        if not self._watch(fs):
            # Callbacks already placed stay harmless: they only fill the queue.
            self._stock_only = True
            return STOCK_WAIT_FOR_ANY(fs, timeout=timeout)
        done: set = set()
        if fs:
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._cond:
                while True:
                    if self._completed:
                        completed, self._completed = self._completed, []
                        for fut in completed:
                            self._watched.discard(fut)
                            # A future the caller dropped meanwhile is not its business.
                            if fut in fs:
                                done.add(fut)
                        if done:
                            break
                    if deadline is None:
                        self._cond.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
        fs.difference_update(done)
        return waiters.DoneAndNotDoneFutures(done, fs)
