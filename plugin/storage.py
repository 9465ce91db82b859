"""The storage of the fleetflow engine: TaskFlow's ``Storage`` with cheaper engine-thread costs.

:class:`Storage` is TaskFlow's, with these differences:

- **Lock re-take.** The engine thread analyses completions and schedules
  atoms while holding the storage's write lock, and every storage read it
  makes on the way (about 50 per atom: states, intentions, arguments,
  results) takes the read lock too. fasteners' ``ReaderWriterLock.read_lock``
  goes through its condition variable twice and a generator context manager
  each time, even for the thread that already holds the write lock and so
  excludes every other reader and writer. :class:`WriterReentrantLock` lets
  the writer's own reads (and re-entries of the write lock) through without
  touching the condition; every other caller gets fasteners' behaviour.
- **Retry loop.** Every checkpoint goes through ``_save_atom_detail`` (or
  ``_save_flow_detail``), each decorated with ``tenacity.retry``: three
  attempts five seconds apart when the backend raises StorageFailure. The
  policy is right, but tenacity builds its retry state objects on every call
  (about a third of a checkpoint's Python time).
  :func:`retry_storage_failures` is the same policy as a plain loop.
- **Setbacks counted.** Every change of an atom's state or intention goes
  through ``_save_atom_detail``, which counts atoms falling back from "done"
  for the selector's cursors (:mod:`.selector`).
- **Injected values remembered** (:mod:`.fetch`) and **checkpoints batched**
  (:mod:`.checkpoints`): the engine thread's saves go to a buffer while the
  engine runs.
- **The flow's own fields saved alone.** A change of the flow's state or meta
  (``set_flow_state``, ``update_flow_metadata``) hands stock's backend the
  whole flow detail, and a backend merges every atom detail of it again: on a
  flow of thousands of atoms, every atom row read back and compared, to find
  that none changed. None can have: an atom detail here changes only through
  its own save, stored at once or held by the buffer, which stores what it
  holds before any flow save. So where the connection can
  (``update_flow_fields``), only the flow's row is written.
"""

from __future__ import annotations

import threading
import time

import fasteners
from taskflow import exceptions as tf_exc
from taskflow import storage as tf_storage

from fleetflow.plugin import fetch, selector

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


# The methods' bodies without tenacity's decorator (same policy, as a loop above).
_SAVE_FLOW_DETAIL = tf_storage.Storage._save_flow_detail.__wrapped__
_SAVE_ATOM_DETAIL = tf_storage.Storage._save_atom_detail.__wrapped__


class Storage(tf_storage.Storage):
    """TaskFlow's ``Storage`` as the fleetflow engine uses it (see the module's doc)."""

    def __init__(self, flow_detail, backend=None, scope_fetcher=None):
        super().__init__(flow_detail, backend=backend, scope_fetcher=scope_fetcher)
        self._lock = WriterReentrantLock()
        #: How many times an atom fell out of "done", per direction (selector cursors).
        self.setbacks = {selector.EXECUTE: 0, selector.REVERT: 0}
        #: Values found through default providers (:mod:`.fetch`), until the next inject.
        self.remembered_defaults: dict = {}
        #: The engine thread's checkpoint buffer while the engine runs (:mod:`.checkpoints`).
        self.checkpoints = None

    def _save_flow_detail(self, conn, original_flow_detail, flow_detail):
        return retry_storage_failures(_SAVE_FLOW_DETAIL, self, conn, original_flow_detail,
                                      flow_detail)

    @fasteners.write_locked
    def set_flow_state(self, state):
        source, clone = self._fetch_flowdetail(clone=True)
        clone.state = state
        self._with_connection(self._save_flow_fields, source, clone)

    @fasteners.write_locked
    def update_flow_metadata(self, update_with):
        if update_with:
            source, clone = self._fetch_flowdetail(clone=True)
            clone.meta.update(update_with)
            self._with_connection(self._save_flow_fields, source, clone)

    def _save_flow_fields(self, conn, original_flow_detail, flow_detail):
        """Store ``flow_detail``'s own fields, its atoms being stored already (module doc)."""
        fields = getattr(conn, "update_flow_fields", None)
        if fields is None:
            return self._save_flow_detail(conn, original_flow_detail, flow_detail)
        # As stock's save: what the backend says it stored becomes the flow's own fields.
        saved = retry_storage_failures(fields, flow_detail)
        original_flow_detail.state = saved.state
        original_flow_detail.meta = saved.meta
        return original_flow_detail

    def _save_atom_detail(self, conn, original_atom_detail, atom_detail):
        before = (original_atom_detail.state, original_atom_detail.intention)
        saved = retry_storage_failures(_SAVE_ATOM_DETAIL, self, conn, original_atom_detail,
                                       atom_detail)
        after = (original_atom_detail.state, original_atom_detail.intention)
        if before != after:
            for direction, satisfied in selector.SATISFIES.items():
                if satisfied(*before) and not satisfied(*after):
                    self.setbacks[direction] += 1
        return saved

    fetch_mapped_args = fetch.fetch_mapped_args

    def _set_result_mapping(self, provider_name, mapping):
        # Every inject ends here: what was remembered may have changed.
        self.remembered_defaults = {}
        return super()._set_result_mapping(provider_name, mapping)

    def _with_connection(self, functor, *args, **kwargs):
        # On the engine thread, while it runs, the checkpoint buffer is the connection.
        buffer = self.checkpoints
        if buffer is not None and buffer.owner == threading.get_ident():
            return functor(buffer, *args, **kwargs)
        return super()._with_connection(functor, *args, **kwargs)

    def flush_checkpoints(self) -> None:
        """Store what this thread's engine holds now (no-op on any other thread).

        For code that must see its engine's checkpoints stored before it goes
        on, such as the crash tests' ``after-checkpoint`` point.
        """
        buffer = self.checkpoints
        if buffer is not None and buffer.owner == threading.get_ident():
            buffer.flush()
