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
   :func:`validate_once` skips the repeat. Within the one validation, stock
   looks up every atom's ``revert`` arguments separately from its
   ``execute`` arguments, though most are the same names (a revert takes
   what the execute took); :func:`validate_sharing_lookups` asks storage
   only about the revert arguments the execute did not already settle, and
   answers those questions in bulk (:class:`_ValidationLookups`): stock builds
   a provider locator and walks the atom's scopes once per argument, and looks
   into the injected values again for every atom.

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
from taskflow import states as tf_states
from taskflow import storage as tf_storage
from taskflow.engines.action_engine import compiler
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


class _ValidationLookups:
    """Stock ``Storage.fetch_unsatisfied_args``'s answers for one validation, in bulk.

    Stock answers each (atom, name) on its own: a provider locator per call, the
    atom's scopes walked level by level, and every default (injected) provider's
    results looked into again. Over a whole flow those answers repeat: whether
    a default provider holds a name does not depend on the atom asking, and an
    atom's visible atoms do not depend on the name. Both are remembered here
    for the length of one validation, under the storage's read lock.
    """

    def __init__(self, storage):
        self._storage = storage
        self._locator = tf_storage._ProviderLocator(
            storage._transients, storage._fetch_providers,
            lambda atom_name: storage._get(atom_name, "last_results", "failure",
                                           tf_storage._EXECUTE_STATES_WITH_RESULTS,
                                           tf_states.EXECUTE))
        self._default_holds: dict = {}

    def _default_provides(self, provider, name) -> bool:
        # As stock's find_potentials: a default provider counts only when its
        # results hold the name now.
        key = (provider, name)
        held = self._default_holds.get(key)
        if held is None:
            try:
                self._locator._try_get_results(name, provider, find_potentials=True)
                held = True
            except tf_exc.NotFound:
                held = False
            self._default_holds[key] = held
        return held

    def missing(self, atom, args_mapping, optional_args) -> set:
        """The bound names of ``args_mapping`` nothing can provide to ``atom``."""
        storage = self._storage
        source, _clone = storage._atomdetail_by_name(atom.name)
        injected = [s for s in (storage._injected_args.get(atom.name, {}),
                                source.meta.get(tf_storage.META_INJECTED, {})) if s]
        visible = None
        missing = set()
        for bound, name in args_mapping.items():
            if bound in optional_args or any(name in s for s in injected):
                continue
            defaults, atom_providers = storage._fetch_providers(name)
            if any(self._default_provides(p, name) for p in defaults):
                continue
            if atom_providers:
                if visible is None:
                    visible = set().union(*storage._scope_fetcher(atom.name))
                if any(p.name in visible for p in atom_providers):
                    continue
            missing.add(bound)
        return missing


def _unsatisfied(lookups: _ValidationLookups, atom) -> tuple[set, set]:
    """(missing execute arguments, missing revert arguments) of ``atom``.

    As two ``fetch_unsatisfied_args`` calls would answer: an argument's
    answer depends only on the atom and the name it is bound to.
    """
    exec_missing = lookups.missing(atom, atom.rebind, atom.optional)
    settled = {bound: name for bound, name in atom.rebind.items()
               if bound not in atom.optional}
    to_ask, revert_missing = {}, set()
    for bound, name in atom.revert_rebind.items():
        if settled.get(bound) != name:
            to_ask[bound] = name
        elif bound in exec_missing and bound not in atom.revert_optional:
            revert_missing.add(bound)
    if to_ask:
        revert_missing |= lookups.missing(atom, to_ask, atom.revert_optional)
    return exec_missing, revert_missing


def _validate(self):
    """Stock ``ActionEngine.validate``: each name of an atom looked up once, in bulk."""
    missing, last_cause, last_node, missing_nodes = set(), None, None, 0
    with self.storage._lock.read_lock():
        lookups = _ValidationLookups(self.storage)
        for atom in self._runtime.iterate_nodes(compiler.ATOMS):
            exec_missing, revert_missing = _unsatisfied(lookups, atom)
            for method, method_missing in (("execute", exec_missing),
                                           ("revert", revert_missing)):
                if method_missing:
                    last_cause = tf_exc.MissingDependencies(
                        atom, sorted(method_missing), cause=last_cause, method=method)
                    last_node = atom
                    missing_nodes += 1
                    missing.update(method_missing)
    if missing:
        if missing_nodes == 1 and last_node is self._flow:
            raise last_cause
        raise tf_exc.MissingDependencies(self._flow, sorted(missing), cause=last_cause)
    self._validated = True


_validate.__name__ = "validate"  # TaskFlow's precondition errors name the method
# The same lock and preconditions as the stock method.
validate_sharing_lookups = fasteners.locked(
    action_engine._pre_check(check_validated=False)(_validate))


def validate_once(self):
    """``ActionEngine.validate`` that does nothing once the flow validated."""
    if self._validated:
        return None
    return validate_sharing_lookups(self)


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
