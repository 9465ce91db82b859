"""TaskFlow patch 12 (see :mod:`fleetflow.engine.taskflow_patches`): pool threads on demand.

The parallel engine runs its tasks on ``futurist.ThreadPoolExecutor(max_workers)``,
which starts a new thread on every submission until it has ``max_workers``
threads, whether or not a worker sits idle (futurist's ``_maybe_spin_up``).
A pool big enough for a thousand boots in flight at once so also gets a
thousand threads for a thousand quick tasks in a row; each start happens on
the engine thread (``Thread.start`` waits for the new thread to run, a GIL
round trip), and the threads then contend for the GIL with the engine thread.
futurist's idle workers also wake every second to look for a shutdown.

:func:`create_executor` gives ``ParallelThreadTaskExecutor`` the standard
library's ``concurrent.futures.ThreadPoolExecutor`` instead. Same ``submit`` /
``shutdown``, futures of the class futurist's futures derive from; it starts a
thread only when no worker is idle, never more than ``max_workers``, and idle
workers block until there is work. ``max_workers=None`` keeps futurist's
default size. Green-thread executors (their own ``_create_executor``) and
executors passed in by the caller are not affected.
"""

from __future__ import annotations

from concurrent import futures

from futurist import _utils as futurist_utils
from taskflow.engines.action_engine import executor as tf_executor

STOCK_CREATE_EXECUTOR = tf_executor.ParallelThreadTaskExecutor._create_executor


def create_executor(self, max_workers=None):
    """The engine's task pool: threads started on demand, at most ``max_workers``."""
    if max_workers is None:
        max_workers = futurist_utils.get_optimal_thread_count()
    return futures.ThreadPoolExecutor(max_workers=max_workers,
                                      thread_name_prefix="taskflow-engine")


def install() -> None:
    tf_executor.ParallelThreadTaskExecutor._create_executor = create_executor


def uninstall() -> None:
    tf_executor.ParallelThreadTaskExecutor._create_executor = STOCK_CREATE_EXECUTOR


def is_installed() -> bool:
    return tf_executor.ParallelThreadTaskExecutor._create_executor is create_executor
