"""The engine's task pool, which also runs tasks that wait without a thread.

TaskFlow's parallel engine hands every task to a PEP 3148 executor: one pool
thread per task for as long as the task runs. A boot waits seconds for its
host, so a thousand boots held a thousand threads, each started by the
engine's thread and each woken, when its host answered, to compete with it
for the interpreter lock.

:class:`StartingExecutor` is that pool (``taskflow_pool_patch`` creates it)
with one more way to run a task: a :class:`~fleetflow.flows.tasks.base.StartedTask`
whose ``can_start()`` is true is started on the engine's thread (``start``
sends and returns a future at once) and finished on a pool thread when that
future is done (``finish``). The engine sees an ordinary future of
``(EXECUTED, result)``, as from TaskFlow's ``_execute_task``: a failure of
``start`` or ``finish`` becomes the task's failure, and the task's result and
state are checkpointed exactly as before. Every other task, and every revert,
goes to the pool unchanged.
"""

from __future__ import annotations

from concurrent import futures

from taskflow.engines.action_engine import executor as tf_executor
from taskflow.types import failure


class StartingExecutor(futures.Executor):
    """``pool`` for every task, plus start-then-finish for tasks that can start."""

    def __init__(self, pool: futures.Executor):
        self.pool = pool

    def submit(self, fn, /, *args, **kwargs) -> futures.Future:
        if fn is tf_executor._execute_task:
            task = args[0]
            can_start = getattr(task, "can_start", None)
            if can_start is not None and can_start():
                return self._start(task, args[1])
        return self.pool.submit(fn, *args, **kwargs)

    def _start(self, task, arguments: dict) -> futures.Future:
        outcome: futures.Future = futures.Future()
        outcome.set_running_or_notify_cancel()
        try:
            task.pre_execute()
            started = task.start(**arguments)
        except Exception:  # noqa: BLE001 - the task's failure, as TaskFlow records it
            failed = failure.Failure()
            task.post_execute()
            outcome.set_result((tf_executor.EXECUTED, failed))
            return outcome
        started.add_done_callback(lambda done: self._hand_over(task, arguments, done, outcome))
        return outcome

    def _hand_over(self, task, arguments: dict, started: futures.Future,
                   outcome: futures.Future) -> None:
        # Runs on whichever thread settled ``started`` (a report's): the
        # finish may write, so it goes to the pool.
        try:
            self.pool.submit(self._finish, task, arguments, started, outcome)
        except RuntimeError:  # the pool is shut down: the engine must still hear
            self._finish(task, arguments, started, outcome)

    def _finish(self, task, arguments: dict, started: futures.Future,
                outcome: futures.Future) -> None:
        try:
            result = task.finish(started, **arguments)
        except Exception:  # noqa: BLE001 - the task's failure, as TaskFlow records it
            result = failure.Failure()
        finally:
            task.post_execute()
        outcome.set_result((tf_executor.EXECUTED, result))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures)
