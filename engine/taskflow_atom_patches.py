"""TaskFlow patches 5 and 6 (see :mod:`fleetflow.engine.taskflow_patches`): per-atom costs.

Kept apart from the compile patches only to keep modules small; they are
installed and removed together by ``taskflow_patches.apply()`` / ``remove()``.
"""

from __future__ import annotations

from taskflow import atom as tf_atom
from taskflow import storage as tf_storage
from taskflow.engines.action_engine.actions import task as task_action
from taskflow.persistence import models as tf_models


class MemoizedReflection:
    """``oslo_utils.reflection`` for ``taskflow.atom``, answers cached per function.

    A bound method is keyed by its function and "bound" (its ``self`` is never
    among the arguments), so every instance of a task class shares one entry.
    Callers get a fresh list each time: TaskFlow edits the one it is given.
    """

    def __init__(self, module):
        self._module = module
        self._cache: dict = {}

    def __getattr__(self, name):
        return getattr(self._module, name)

    def _cached(self, what: str, function, compute, *extra):
        func = getattr(function, "__func__", None)
        key = (what, func if func is not None else function, func is not None, *extra)
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = compute()
            return value
        except TypeError:  # an unhashable callable: ask every time
            return compute()

    def get_callable_args(self, function, required_only=False):
        return list(self._cached(
            "args", function,
            lambda: tuple(self._module.get_callable_args(function,
                                                         required_only=required_only)),
            required_only))

    def accepts_kwargs(self, function):
        return self._cached("kwargs", function,
                            lambda: self._module.accepts_kwargs(function))


STOCK_ATOM_REFLECTION = tf_atom.reflection
STOCK_CHANGE_STATE = task_action.TaskAction.change_state


def _stage_progress(storage, task_name: str, progress: float) -> None:
    """Set a task's progress in memory only; the next save of the atom stores it."""
    with storage._lock.write_lock():
        source, _ = storage._atomdetail_by_name(task_name,
                                                expected_type=tf_models.TaskDetail)
        source.meta[tf_storage.META_PROGRESS] = progress


def change_state_with_progress(self, task, state, progress=None,
                               result=task_action.TaskAction.NO_RESULT):
    """``TaskAction.change_state`` saving the progress with the state, in one write."""
    old_state = self._storage.get_atom_state(task.name)
    if self._is_identity_transition(old_state, state, task, progress=progress):
        return
    staged = progress is not None and old_state != state
    if staged:
        _stage_progress(self._storage, task.name, progress)
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
