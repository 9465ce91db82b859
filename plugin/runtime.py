"""The runtime of the fleetflow engine: TaskFlow's ``Runtime`` with its own parts.

:class:`Runtime` builds, where TaskFlow's builds its own:

- each atom's scope walker from one index of the compiled hierarchy
  (:mod:`.scopes`);
- the :class:`~.selector.CursorSelector`;
- the state machine's waiter: a :class:`~.waiter.CompletionWaiter` of its own,
  storing held checkpoints before it waits (:class:`~.checkpoints.StoringWaiter`);
- the scheduler, storing the state changes it made before the calls go out
  (:func:`~.checkpoints.schedule_held`);
- the task and retry actions, dispatching through
  :class:`~.checkpoints.HeldDispatch`; the task action saves a task's
  progress together with its state (:class:`TaskAction`), and a task that
  starts keeps nothing of its earlier try (below).

**Progress with the state.** A task's progress (0.0 when it starts, 1.0 when
it ends) is saved by stock in a write of its own right after the state change
it goes with: four checkpoints per task where two carry the same information.
:meth:`TaskAction.change_state` puts the progress into the atom detail before
the state is saved, so one write stores both.

**Times with the states.** The same staging stamps a task's meta with when its
execute started and ended and when it was reverted (``STARTED_AT`` ...), stored
with those states (no write of their own): the flow graph shows each atom's
start and duration from them.

**A new try starts clean.** Stock keeps a task's result of the try before
when a retry runs it again; a revert after a crash mid-try is then handed
the earlier try's result (TaskFlow's ``Storage.get`` allows it while
REVERTING). :meth:`TaskAction.change_state` empties the result and failure
of a task that starts RUNNING, in the same write. Under the stock engine the
tasks themselves must not trust such a result (docs/engine.md).
"""

from __future__ import annotations

import functools
import time

from taskflow import exceptions as tf_exc
from taskflow import states as st
from taskflow import storage as tf_storage
from taskflow.engines.action_engine import builder as tf_builder
from taskflow.engines.action_engine import compiler as com
from taskflow.engines.action_engine import runtime as tf_runtime
from taskflow.engines.action_engine import scheduler as tf_scheduler
from taskflow.engines.action_engine.actions import retry as tf_retry_action
from taskflow.engines.action_engine.actions import task as tf_task_action
from taskflow.persistence import models as tf_models
from taskflow.utils import misc

from fleetflow.plugin import checkpoints, scopes
from fleetflow.plugin.selector import CursorSelector
from fleetflow.plugin.waiter import CompletionWaiter


class TaskAction(tf_task_action.TaskAction):
    """TaskFlow's ``TaskAction``: held dispatch, and progress saved with the state."""

    def __init__(self, storage, notifier, task_executor):
        super().__init__(storage, notifier, checkpoints.HeldDispatch(task_executor))

    def change_state(self, task, state, progress=None, result=tf_task_action.TaskAction.NO_RESULT):
        """``TaskAction.change_state`` saving the progress with the state, in one write."""
        old_state = self._storage.get_atom_state(task.name)
        if self._is_identity_transition(old_state, state, task, progress=progress):
            return
        staged = progress is not None and old_state != state
        if staged:
            _stage_progress(self._storage, task.name, progress)
        if state == st.RUNNING:
            _forget_earlier_try(self._storage, task.name)
        if state in TIMED_STATES:
            _stage_time(self._storage, task.name, state)
        if state in self.SAVE_RESULT_STATES:
            self._storage.save(task.name, None if result is self.NO_RESULT else result, state)
        else:
            self._storage.set_atom_state(task.name, state)
        if progress is not None and not staged:
            self._storage.set_task_progress(task.name, progress)
        details = {"task_name": task.name, "task_uuid": self._storage.get_atom_uuid(task.name),
                   "old_state": old_state}
        if result is not self.NO_RESULT:
            details["result"] = result
        self._notifier.notify(state, details)
        if progress is not None:
            task.update_progress(progress)


def _stage_progress(storage, task_name: str, progress: float) -> None:
    """Set a task's progress in memory only; the next save of the atom stores it."""
    with storage._lock.write_lock():
        source, _ = storage._atomdetail_by_name(task_name, expected_type=tf_models.TaskDetail)
        source.meta[tf_storage.META_PROGRESS] = progress


#: Keys of a task detail's ``meta``: when its last execute started and ended, and when
#: it was reverted (epoch seconds), stored by the fleetflow engine with those states.
STARTED_AT, ENDED_AT, REVERTED_AT = "started_at", "ended_at", "reverted_at"
TIMED_STATES = {st.RUNNING: STARTED_AT, st.SUCCESS: ENDED_AT, st.FAILURE: ENDED_AT,
                st.REVERTED: REVERTED_AT, st.REVERT_FAILURE: REVERTED_AT}


def _stage_time(storage, task_name: str, state: str) -> None:
    """Stamp the state's time in the task's meta, in memory; the state's save stores it."""
    with storage._lock.write_lock():
        source, _ = storage._atomdetail_by_name(task_name, expected_type=tf_models.TaskDetail)
        if state == st.RUNNING:
            source.meta.pop(ENDED_AT, None)
            source.meta.pop(REVERTED_AT, None)
        source.meta[TIMED_STATES[state]] = time.time()


def _forget_earlier_try(storage, task_name: str) -> None:
    """Drop, in memory, what an earlier try of the task left; its RUNNING save stores that.

    A retry resets its chain's atoms to PENDING with stock's ``change_state``,
    which keeps each atom's result (and failure) of the try before. Should the
    process die while the atom runs again, whoever resumes the flow and
    reverts it is handed that result by ``Storage.get`` (REVERTING allows it):
    a claim would release the host of the earlier try and leak the new one.
    A task that starts has no outcome yet, so it keeps none.
    """
    with storage._lock.write_lock():
        source, _ = storage._atomdetail_by_name(task_name, expected_type=tf_models.TaskDetail)
        source.results = source.failure = None
        source.revert_results = source.revert_failure = None


class RetryAction(tf_retry_action.RetryAction):
    """TaskFlow's ``RetryAction`` with held dispatch."""

    def __init__(self, storage, notifier, retry_executor):
        super().__init__(storage, notifier, checkpoints.HeldDispatch(retry_executor))


class Scheduler(tf_scheduler.Scheduler):
    """TaskFlow's ``Scheduler``: the atoms' new states stored before their calls go out."""

    def schedule(self, atoms):
        return checkpoints.schedule_held(self, atoms, super().schedule)


class Runtime(tf_runtime.Runtime):
    """TaskFlow's ``Runtime`` with the fleetflow engine's parts (see the module's doc)."""

    def compile(self):
        """TaskFlow 6.5's ``Runtime.compile`` with indexed scope walkers.

        The body is stock's except for the walker; ``plugin.compat``
        keeps it to the series it was copied from.
        """
        change_state_handlers = {
            com.TASK: functools.partial(self.task_action.change_state, progress=0.0),
            com.RETRY: self.retry_action.change_state,
        }
        schedulers = {com.RETRY: self.retry_scheduler, com.TASK: self.task_scheduler}
        check_transition_handlers = {com.TASK: st.check_task_transition,
                                     com.RETRY: st.check_retry_transition}
        actions = {com.TASK: self.task_action, com.RETRY: self.retry_action}
        graph = self._compilation.execution_graph
        index = scopes.index_for(self._compilation.hierarchy)
        for node, node_data in graph.nodes(data=True):
            node_kind = node_data["kind"]
            if node_kind in com.FLOWS:
                continue
            if node_kind not in com.ATOMS:
                raise tf_exc.CompilationFailure(
                    f"Unknown node kind '{node_kind}' encountered")
            self._atom_cache[node.name] = {
                "scope_walker": scopes.IndexedScopeWalker(self.compilation, node, index,
                                                          names_only=True),
                "check_transition_handler": check_transition_handlers[node_kind],
                "change_state_handler": change_state_handlers[node_kind],
                "scheduler": schedulers[node_kind],
                "edge_deciders": tuple(self._walk_edge_deciders(graph, node)),
                "action": actions[node_kind],
            }

    @misc.cachedproperty
    def selector(self):
        return CursorSelector(self)

    @misc.cachedproperty
    def builder(self):
        waiter = checkpoints.StoringWaiter(self.storage, CompletionWaiter())
        return tf_builder.MachineBuilder(self, waiter)

    @misc.cachedproperty
    def scheduler(self):
        return Scheduler(self)

    @misc.cachedproperty
    def retry_action(self):
        return RetryAction(self._storage, self._atom_notifier, self._retry_executor)

    @misc.cachedproperty
    def task_action(self):
        return TaskAction(self._storage, self._atom_notifier, self._task_executor)
