"""TaskFlow patches 8 and 9 (see :mod:`fleetflow.engine.taskflow_patches`): engine loop costs.

8. The engine thread analyses completions and schedules atoms while holding
   its storage's write lock, and every storage read it makes on the way
   (about 50 per atom: states, intentions, arguments, results) takes the
   read lock too. fasteners' ``ReaderWriterLock.read_lock`` goes through its
   condition variable twice and a generator context manager each time, even
   for the thread that already holds the write lock and so excludes every
   other reader and writer. :class:`WriterReentrantLock` lets the writer's
   own reads (and re-entries of the write lock) through without touching the
   condition; every other caller gets fasteners' behaviour unchanged.

9. ``ActionEngine.run_iter`` validates the flow (every atom's arguments against
   every provider in scope: two walks per atom) each time it starts, and a
   conductor validates once more itself just before. Validation depends on
   the compiled graph, fixed once compiled, and on injected arguments, which
   can only be added, so a flow that validated stays valid:
   :func:`validate_once` skips the repeat.

11. Every checkpoint goes through ``Storage._save_atom_detail`` (or
   ``_save_flow_detail``), each decorated with ``tenacity.retry``: three
   attempts five seconds apart when the backend raises StorageFailure. The
   policy is right, but tenacity builds its retry state objects on every call
   (about a third of a checkpoint's Python time). :func:`retry_storage_failures`
   is the same policy as a plain loop.
"""

from __future__ import annotations

import threading
import time

import fasteners
from taskflow import exceptions as tf_exc
from taskflow import storage as tf_storage
from taskflow.engines.action_engine import engine as action_engine

STOCK_STORAGE_INIT = tf_storage.Storage.__init__
STOCK_VALIDATE = action_engine.ActionEngine.validate
STOCK_SAVE_FLOW_DETAIL = tf_storage.Storage._save_flow_detail

_current_thread = threading.current_thread


class _Reentry:
    """The writer coming back in: only the entry count changes."""

    __slots__ = ("_lock",)

    def __init__(self, lock):
        self._lock = lock

    def __enter__(self):
        self._lock._writer_entries += 1
        return self._lock

    def __exit__(self, *exc_info):
        self._lock._writer_entries -= 1
        return False


class _WriterRead:
    """A read by the thread holding the write lock: nothing to wait for."""

    __slots__ = ("_lock",)

    def __init__(self, lock):
        self._lock = lock

    def __enter__(self):
        return self._lock

    def __exit__(self, *exc_info):
        return False


class WriterReentrantLock(fasteners.ReaderWriterLock):
    """``ReaderWriterLock`` whose write-lock holder reads and re-enters without waiting."""

    def __init__(self):
        super().__init__()
        self._writer_read = _WriterRead(self)
        self._reentry = _Reentry(self)

    def read_lock(self):
        writer = self._writer
        if writer is not None and writer == self._current_thread():
            return self._writer_read
        return super().read_lock()

    def write_lock(self):
        writer = self._writer
        if writer is not None and writer == self._current_thread():
            return self._reentry
        return super().write_lock()


def storage_init_with_writer_reentrant_lock(self, *args, **kwargs):
    STOCK_STORAGE_INIT(self, *args, **kwargs)
    self._lock = WriterReentrantLock()


def validate_once(self):
    """``ActionEngine.validate`` that does nothing once the flow validated."""
    if self._validated:
        return None
    return STOCK_VALIDATE(self)


def retry_storage_failures(function, *args):
    """``function(*args)``, retried as TaskFlow's storage does: StorageFailure only,
    ``RETRY_ATTEMPTS`` attempts ``RETRY_WAIT_TIMEOUT`` seconds apart, last error raised."""
    attempt = 1
    while True:
        try:
            return function(*args)
        except tf_exc.StorageFailure:
            if attempt >= tf_storage.RETRY_ATTEMPTS:
                raise
        attempt += 1
        time.sleep(tf_storage.RETRY_WAIT_TIMEOUT)


def save_flow_detail(self, conn, original_flow_detail, flow_detail):
    """Stock ``Storage._save_flow_detail`` with its retries as a plain loop."""
    return retry_storage_failures(STOCK_SAVE_FLOW_DETAIL.__wrapped__, self, conn,
                                  original_flow_detail, flow_detail)


def install() -> None:
    tf_storage.Storage.__init__ = storage_init_with_writer_reentrant_lock
    tf_storage.Storage._save_flow_detail = save_flow_detail
    action_engine.ActionEngine.validate = validate_once


def uninstall() -> None:
    tf_storage.Storage.__init__ = STOCK_STORAGE_INIT
    tf_storage.Storage._save_flow_detail = STOCK_SAVE_FLOW_DETAIL
    action_engine.ActionEngine.validate = STOCK_VALIDATE


def is_installed() -> bool:
    return (tf_storage.Storage.__init__ is storage_init_with_writer_reentrant_lock
            and tf_storage.Storage._save_flow_detail is save_flow_detail
            and action_engine.ActionEngine.validate is validate_once)
