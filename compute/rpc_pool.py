"""The compute agent's worker threads: started up front, fed by one queue.

oslo.messaging's RPC server reads requests on one poll thread and hands each
to its executor. A pool that starts threads on demand (the standard
library's, futurist's) starts them inside ``submit``, on that poll thread, and
each start waits until the new thread runs: a thousand builds arriving at once
had the agent's only reader start a thousand threads one after the other
before it could read the next request. Here the threads a burst of builds
needs exist before the first request, ``submit`` is one put on a
``SimpleQueue`` and wakes one idle worker; only beyond them does ``submit``
start a thread, when none is idle, up to ``max_workers``.
"""

from __future__ import annotations

import queue
import threading
from concurrent import futures

_STOP = object()


class PrestartedPool:
    """``submit`` / ``shutdown`` as oslo.messaging's server uses them.

    ``prestart`` threads start with the pool; more, up to ``max_workers``,
    when work arrives while none is idle.
    """

    def __init__(self, max_workers: int, prestart: int | None = None,
                 thread_name_prefix: str = "compute-agent"):
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._shutdown = False
        self._lock = threading.Lock()
        # Idle workers minus queued items: below zero, work waits for a thread.
        self._available = 0
        self._threads: list[threading.Thread] = []
        with self._lock:
            for _ in range(max_workers if prestart is None else min(prestart, max_workers)):
                self._start_worker()

    @property
    def threads(self) -> int:
        return len(self._threads)

    def _start_worker(self) -> None:
        thread = threading.Thread(target=self._worker, daemon=True,
                                  name=f"{self._prefix}_{len(self._threads)}")
        self._threads.append(thread)
        self._available += 1
        thread.start()

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is _STOP:
                return
            try:
                self._run(item)
            finally:
                with self._lock:
                    self._available += 1

    @staticmethod
    def _run(item) -> None:
        future, fn, args, kwargs = item
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the future
            future.set_exception(exc)
        else:
            future.set_result(result)

    def submit(self, fn, /, *args, **kwargs) -> futures.Future:
        future: futures.Future = futures.Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit after shutdown")
            self._available -= 1
            if self._available < 0 and len(self._threads) < self._max_workers:
                self._start_worker()
            self._work.put((future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Run what was submitted (unless ``cancel_futures``), then end every thread."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            if cancel_futures:
                self._cancel_queued()
            for _ in self._threads:
                self._work.put(_STOP)
        if wait:
            for thread in self._threads:
                thread.join()

    def _cancel_queued(self) -> None:
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                return
            item[0].cancel()
