"""The task pool of the fleetflow engine: threads started on demand.

TaskFlow's parallel engine runs its tasks on ``futurist.ThreadPoolExecutor(max_workers)``,
which starts a new thread on every submission until it has ``max_workers``
threads, whether or not a worker sits idle (futurist's ``_maybe_spin_up``).
A pool big enough for a thousand boots in flight at once so also gets a
thousand threads for a thousand quick tasks in a row; each start happens on
the engine thread (``Thread.start`` waits for the new thread to run, a GIL
round trip), and the threads then contend for the GIL with the engine thread.
futurist's idle workers also wake every second to look for a shutdown.

:class:`TaskExecutor` gives the engine the standard library's
``concurrent.futures.ThreadPoolExecutor`` instead. Same ``submit`` /
``shutdown``, futures of the class futurist's futures derive from; it starts a
thread only when no worker is idle, never more than ``max_workers``, and idle
workers block until there is work. The engine owns the pool: it is created
when a run starts and shut down (waiting for its threads) when the run ends,
as TaskFlow does with its own. ``max_workers=None`` keeps futurist's default
size. An executor passed in by the caller (``executor=<instance>``) is used
as TaskFlow uses it, and not shut down by the engine.
"""

from __future__ import annotations

from concurrent import futures

from futurist import _utils as futurist_utils
from taskflow.engines.action_engine import executor as tf_executor


class TaskExecutor(tf_executor.ParallelThreadTaskExecutor):
    """TaskFlow's thread task executor on a standard-library pool of its own."""

    def _create_executor(self, max_workers=None):
        if max_workers is None:
            max_workers = futurist_utils.get_optimal_thread_count()
        return futures.ThreadPoolExecutor(max_workers=max_workers,
                                          thread_name_prefix="taskflow-engine")
