"""The fleetflow engine starts a pool thread only when none is idle; stock starts one per task."""

from __future__ import annotations

import threading
from concurrent import futures

import futurist
from taskflow import engines as tf_engines
from taskflow import states as st
from taskflow import task
from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.plugin.executor import TaskExecutor

HANG_GUARD_S = 60


FAST = "fleetflow-parallel"


class RecordThread(task.Task):
    """Notes which thread ran it."""

    def __init__(self, name, seen: dict):
        super().__init__(name)
        self._seen = seen

    def execute(self):
        self._seen[self.name] = threading.get_ident()


class Rendezvous(task.Task):
    """Returns only once ``parties`` tasks run at the same time."""

    def __init__(self, name, barrier, seen: dict):
        super().__init__(name)
        self._barrier = barrier
        self._seen = seen

    def execute(self):
        self._barrier.wait()
        self._seen[self.name] = threading.get_ident()


def threads_started_for_a_chain(monkeypatch, engine_name: str, count: int,
                                max_workers: int) -> int:
    """Threads started while an engine runs a chain of ``count`` tasks, one after another."""
    started = []
    real_start = threading.Thread.start

    def counting_start(thread):
        started.append(thread)
        real_start(thread)

    seen: dict = {}
    flow = linear_flow.Flow("chain").add(*(RecordThread(f"t{i}", seen) for i in range(count)))
    engine = tf_engines.load(flow, engine=engine_name, max_workers=max_workers)
    monkeypatch.setattr(threading.Thread, "start", counting_start)
    engine.run()
    monkeypatch.undo()
    assert len(seen) == count
    return len(started)


def test_stock_starts_a_thread_per_task_even_when_one_is_idle(monkeypatch):
    assert threads_started_for_a_chain(monkeypatch, "parallel", 30, max_workers=50) == 30


def test_fleetflow_engine_reuses_the_idle_thread_for_a_chain(monkeypatch):
    # Each task is submitted after the previous one finished, so one thread
    # is enough; another starts only when the worker has not yet marked itself
    # idle by the time the engine submits the next task.
    assert threads_started_for_a_chain(monkeypatch, FAST, 30, max_workers=50) <= 10


def test_fleetflow_pool_grows_to_what_runs_at_once_and_no_further():
    count = 40
    seen: dict = {}
    barrier = threading.Barrier(count, timeout=HANG_GUARD_S)
    flow = unordered_flow.Flow("wave").add(
        *(Rendezvous(f"r{i}", barrier, seen) for i in range(count)))
    engine = tf_engines.load(flow, engine=FAST, max_workers=count)
    engine.run()
    assert {engine.storage.get_atom_state(f"r{i}") for i in range(count)} == {st.SUCCESS}
    # All forty waited for each other, so each had a thread of its own.
    assert len(set(seen.values())) == count


def test_max_workers_still_bounds_the_pool():
    seen: dict = {}
    barrier = threading.Barrier(3, timeout=HANG_GUARD_S)
    flow = unordered_flow.Flow("wave").add(
        *(Rendezvous(f"r{i}", barrier, seen) for i in range(9)))
    tf_engines.load(flow, engine=FAST, max_workers=3).run()
    assert len(seen) == 9
    assert len(set(seen.values())) == 3


def test_executor_kinds_and_default_size():
    pool = TaskExecutor()._create_executor(max_workers=None)
    try:
        assert isinstance(pool, futures.ThreadPoolExecutor)
        assert pool._max_workers == futurist.ThreadPoolExecutor()._max_workers
    finally:
        pool.shutdown()
    engine = tf_engines.load(linear_flow.Flow("f").add(RecordThread("a", {})), engine=FAST,
                             executor="threads")
    assert isinstance(engine._task_executor, TaskExecutor)
    engine.run()
    assert engine._task_executor._executor is None  # the engine shut its own pool down
    # An executor the caller passes in is used as it is, and left running.
    given = futurist.ThreadPoolExecutor(max_workers=2)
    engine = tf_engines.load(linear_flow.Flow("f").add(RecordThread("a", {})), engine=FAST,
                             executor=given)
    engine.run()
    assert engine._task_executor._executor is given
    assert given.alive
    given.shutdown()
