"""Checkpoints of the fleetflow engine, stored in batches (write-ahead).

Stock TaskFlow commits every change of every atom's state on its own, before
it moves on: a 1,000-instance reservation makes about 6,000 commits, one at a
time, all on the engine thread. What the engine needs from a checkpoint is
only this (write-ahead): before an atom's ``execute`` or ``revert`` starts, and
before the flow's own state is saved, everything the engine decided up to
then is stored. A state nobody acted on yet may reach the database a little
later; a crash in between loses it, and TaskFlow's resume then runs that atom
again from its last stored state, exactly as it does after a crash just
before a stock checkpoint (which is why every task here is idempotent).

So, while the engine runs (its ``run_iter``), the atom details its thread
saves are held in a :class:`CheckpointBuffer` (the last save of each
atom wins) and stored together, in one transaction where the backend can
(``update_atom_details_many``), at these barriers:

- scheduling (the runtime's ``Scheduler.schedule``): the executors' calls are
  held back by :class:`HeldDispatch` while the atoms go to RUNNING /
  REVERTING, then the buffer is stored, then the calls are made;
- waiting (the machine's waiter, :class:`StoringWaiter`): nothing the engine
  completed stays unstored while it waits for work in progress;
- any other use of the backend by the engine thread (the flow's state,
  ``ensure_atoms``, reads): it sees everything saved before it;
- the end of the run;
- ``Storage.flush_checkpoints()``, added for code that must know its engine's
  checkpoints are stored (the crash tests' ``after-checkpoint`` point).

Saves from other threads (a task's progress) are stored at once, as stock. The
flow detail's meta says ``checkpoints: batched`` for a flow this engine wrote
(``plugin.flow_meta``). A lost database connection at a barrier is waited out
within the database's outage window (``persistence.db_retry``), other storage
failures are retried with storage's own policy
(:func:`.storage.retry_storage_failures`); when the last attempt fails, the
held calls are cancelled and the failure goes to the engine as a scheduling
failure would.

**Withheld outcomes.** An atom that failed because the database stayed
unreachable for the whole window (``DatabaseUnavailable``, raised by the
task wrappers of ``flows.tasks.base``) failed through no fault of its own:
recording its FAILURE would make the engine revert its flow (or retry the
instance elsewhere) once the database is back. The buffer refuses to save
that outcome: the save raises ``DatabaseUnavailable``, the engine stops with
it (TaskFlow handles a failed completion so), the atom stays RUNNING in the
logbook, and the conductor, for which it is a "do not consume" error, leaves
the job for a resume. Once the buffer has refused an outcome, or met
``DatabaseUnavailable`` storing checkpoints, it refuses the flow's FAILURE
too: stored, it would make the flow look finished to whoever resumes it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent import futures

from taskflow import states as tf_states
from taskflow.types import failure

from fleetflow.persistence import db_retry
from fleetflow.plugin.storage import retry_storage_failures

LOG = logging.getLogger(__name__)

_get_ident = threading.get_ident


class CheckpointBuffer:
    """Atom detail saves of one engine thread, stored at the next barrier.

    Stands in for a backend connection inside ``Storage._with_connection``,
    through which TaskFlow's storage only ever saves an atom detail or a flow
    detail: ``update_atom_details`` is held; ``update_flow_details`` (and
    ``update_flow_fields``, the flow's own fields alone: ``plugin.storage``)
    stores what is held first, then runs on a real connection. Outcomes caused by an
    unreachable database are refused (see "Withheld outcomes" above).
    """

    def __init__(self, backend):
        self._backend = backend
        self._held: dict = {}
        self.owner = _get_ident()
        self._policy = getattr(backend, "retry_policy", None)
        # Whether the backend's connections write a flow's own fields alone (asked once).
        self._fields_alone: bool | None = None
        # Why the engine stops for an outage, once it does (see the module doc).
        self.withheld: str | None = None

    def update_atom_details(self, atom_detail, ignore_missing=False):
        if _database_unavailable(atom_detail):
            self.withheld = f"the outcome of {atom_detail.name}"
            LOG.warning("%s failed because the database was unreachable: its outcome is "
                        "not recorded, the flow stops to be resumed", atom_detail.name)
            raise db_retry.DatabaseUnavailable(
                f"{atom_detail.name}: the database was unreachable; outcome withheld")
        if ignore_missing:
            return self._call("update_atom_details", atom_detail, ignore_missing=True)
        # Re-inserted: the dict keeps the order of each atom's last save.
        self._held.pop(atom_detail.uuid, None)
        self._held[atom_detail.uuid] = atom_detail
        return atom_detail

    def update_flow_details(self, flow_detail):
        self._refuse_failure(flow_detail)
        return self._call("update_flow_details", flow_detail)

    def update_flow_fields(self, flow_detail):
        """The flow's own fields alone (``Storage.set_flow_state``), once every held
        atom detail is stored; the whole flow detail where the backend cannot."""
        self._refuse_failure(flow_detail)
        if self._fields_alone is None:
            with contextlib.closing(self._backend.get_connection()) as conn:
                self._fields_alone = hasattr(conn, "update_flow_fields")
        return self._call("update_flow_fields" if self._fields_alone else "update_flow_details",
                          flow_detail)

    def _refuse_failure(self, flow_detail) -> None:
        if self.withheld and flow_detail.state == tf_states.FAILURE:
            raise db_retry.DatabaseUnavailable(f"flow stopped: {self.withheld} was withheld")

    def _call(self, name, *args, **kwargs):
        """Store what is held, then call connection method ``name``."""
        self.flush()
        try:
            with contextlib.closing(self._backend.get_connection()) as conn:
                return getattr(conn, name)(*args, **kwargs)
        except db_retry.DatabaseUnavailable:
            self.withheld = self.withheld or f"a call to {name}"
            raise

    def close(self):
        pass

    def flush(self) -> None:
        """Store every held save (retried as storage retries); kept when it fails."""
        if not self._held:
            return
        try:
            retry_storage_failures(self._store_retrying)
        except db_retry.DatabaseUnavailable:
            self.withheld = self.withheld or "storing checkpoints"
            raise

    def _store_retrying(self) -> None:
        if self._policy is None:
            return self._store()
        return self._policy.run(self._store, "storing checkpoints")

    def _store(self) -> None:
        details = list(self._held.values())
        with contextlib.closing(self._backend.get_connection()) as conn:
            many = getattr(conn, "update_atom_details_many", None)
            if many is not None:
                many(details)
            else:
                for detail in details:
                    conn.update_atom_details(detail)
        self._held.clear()


def _database_unavailable(atom_detail) -> bool:
    """True for a FAILURE (or REVERT_FAILURE) caused by DatabaseUnavailable."""
    state = atom_detail.state
    if state == tf_states.FAILURE:
        fail = atom_detail.failure
    elif state == tf_states.REVERT_FAILURE:
        fail = atom_detail.revert_failure
    else:
        return False
    if fail is None:
        return False
    return any(f.check(db_retry.DatabaseUnavailable) for f in (fail, *fail.causes))


def buffered_run(storage, run_iter):
    """Drive ``run_iter`` (a generator of engine states) with the thread's checkpoints
    buffered in ``storage``, stored at the end, and the buffer gone afterwards."""
    if storage.checkpoints is not None:
        # Already running (a nested run): stock behaviour for this one.
        yield from run_iter
        return
    buffer = CheckpointBuffer(storage._backend)
    storage.checkpoints = buffer
    try:
        yield from run_iter
    except BaseException:
        # Store what can be stored, without hiding why the run ended.
        with contextlib.suppress(Exception):
            buffer.flush()
        raise
    else:
        buffer.flush()
    finally:
        storage.checkpoints = None


class _Forwarded(futures.Future):
    """The future of a held call; once the call is made, cancelling it cancels the call's.

    So it cancels exactly when the executor's own future would: not once the
    call started running.
    """

    real: futures.Future | None = None

    def cancel(self) -> bool:
        real = self.real
        if real is not None and not real.cancel():
            return False
        return super().cancel()


class HeldDispatch:
    """An action's executor whose calls wait, while held, until :meth:`release`.

    While held, each call returns a future of its own at once (with ``atom``
    set, as the executors do); the real call is made at release and its
    outcome copied into that future. Not held, calls go straight through.
    It offers only the four calls TaskFlow's task and retry actions make.
    """

    def __init__(self, executor):
        self._executor = executor
        self._held: list | None = None

    def hold(self) -> None:
        self._held = []

    def _call(self, method: str, atom, *args, **kwargs):
        if self._held is None:
            return getattr(self._executor, method)(atom, *args, **kwargs)
        fut = _Forwarded()
        fut.atom = atom
        self._held.append((fut, method, atom, args, kwargs))
        return fut

    def execute_task(self, task, *args, **kwargs):
        return self._call("execute_task", task, *args, **kwargs)

    def revert_task(self, task, *args, **kwargs):
        return self._call("revert_task", task, *args, **kwargs)

    def execute_retry(self, retry, *args, **kwargs):
        return self._call("execute_retry", retry, *args, **kwargs)

    def revert_retry(self, retry, *args, **kwargs):
        return self._call("revert_retry", retry, *args, **kwargs)

    def release(self, cancel: bool = False) -> None:
        """Make the held calls (or, ``cancel``, cancel their futures instead)."""
        held, self._held = self._held or [], None
        for fut, method, atom, args, kwargs in held:
            if cancel or fut.cancelled():
                fut.cancel()
                continue
            try:
                real = getattr(self._executor, method)(atom, *args, **kwargs)
            except BaseException as error:  # noqa: BLE001 - handed to the engine
                fut.set_exception(error)
                continue
            fut.real = real
            real.add_done_callback(lambda r, fut=fut: _copy_outcome(r, fut))


def _copy_outcome(source: futures.Future, target: futures.Future) -> None:
    with contextlib.suppress(futures.InvalidStateError):
        if source.cancelled():
            target.cancel()
        elif source.exception() is not None:
            target.set_exception(source.exception())
        else:
            target.set_result(source.result())


def schedule_held(scheduler, atoms, stock_schedule):
    """``Scheduler.schedule``: state changes first, stored together, then the calls.

    ``stock_schedule(atoms)`` is TaskFlow's; the runtime's task and retry
    actions dispatch through :class:`HeldDispatch`.
    """
    runtime = scheduler._runtime
    storage = runtime.storage
    buffer = storage.checkpoints
    if buffer is None or buffer.owner != _get_ident():
        return stock_schedule(atoms)
    dispatches = [runtime.task_action._task_executor, runtime.retry_action._retry_executor]
    for dispatch in dispatches:
        dispatch.hold()
    try:
        futs, failures = stock_schedule(atoms)
        buffer.flush()
    except Exception:
        for dispatch in dispatches:
            dispatch.release(cancel=True)
        return set(), [failure.Failure()]
    for dispatch in dispatches:
        dispatch.release()
    return futs, failures


class StoringWaiter:
    """The machine's waiter (``inner``), storing the engine's held checkpoints first."""

    __slots__ = ("inner", "_storage")

    def __init__(self, storage, inner):
        self._storage = storage
        self.inner = inner

    def __call__(self, fs, timeout=None):
        self._storage.flush_checkpoints()
        return self.inner(fs, timeout=timeout)
