"""The compute agent's worker pool: threads started up front, more only when none is idle."""

from __future__ import annotations

import threading

import pytest

from fleetflow.compute.rpc_pool import PrestartedPool

GUARD_S = 30


def test_prestarted_threads_exist_before_any_work():
    pool = PrestartedPool(max_workers=8, prestart=3)
    try:
        assert pool.threads == 3
        assert sum(t.name.startswith("compute-agent_") and t.is_alive()
                   for t in threading.enumerate()) >= 3
    finally:
        pool.shutdown()


def test_results_and_errors_reach_the_futures():
    pool = PrestartedPool(max_workers=2)
    try:
        assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(GUARD_S) == 5
        with pytest.raises(KeyError):
            pool.submit({}.__getitem__, "missing").result(GUARD_S)
    finally:
        pool.shutdown()


def test_work_beyond_the_idle_threads_starts_more_up_to_the_bound():
    pool = PrestartedPool(max_workers=5, prestart=2)
    release = threading.Event()
    running = threading.Semaphore(0)

    def hold(i):
        running.release()
        release.wait(GUARD_S)
        return i

    try:
        calls = [pool.submit(hold, i) for i in range(8)]
        for _ in range(5):  # five run at once: the bound, not the eight submitted
            assert running.acquire(timeout=GUARD_S)
        assert pool.threads == 5
        assert not running.acquire(timeout=0.2)
        release.set()
        assert [c.result(GUARD_S) for c in calls] == list(range(8))
        assert pool.threads == 5
    finally:
        release.set()
        pool.shutdown()


def test_sequential_work_reuses_idle_threads():
    pool = PrestartedPool(max_workers=50, prestart=1)
    try:
        for i in range(30):
            assert pool.submit(lambda x: x * 2, i).result(GUARD_S) == i * 2
        assert pool.threads <= 2
    finally:
        pool.shutdown()


def test_shutdown_runs_what_was_queued_then_ends_every_thread():
    pool = PrestartedPool(max_workers=1)
    gate = threading.Event()
    done = []
    first = pool.submit(lambda: gate.wait(GUARD_S))
    queued = [pool.submit(done.append, i) for i in range(5)]
    gate.set()
    pool.shutdown(wait=True)
    assert first.result(0) is True
    assert done == [0, 1, 2, 3, 4] and all(q.done() for q in queued)
    assert not any(t.name.startswith("compute-agent_") and t.is_alive()
                   for t in pool._threads)
    with pytest.raises(RuntimeError):
        pool.submit(done.append, 9)


def test_shutdown_can_cancel_what_has_not_started():
    pool = PrestartedPool(max_workers=1)
    gate = threading.Event()
    started = threading.Event()

    def blocker():
        started.set()
        gate.wait(GUARD_S)

    running = pool.submit(blocker)
    assert started.wait(GUARD_S)
    queued = [pool.submit(lambda: None) for _ in range(3)]
    pool.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert running.result(GUARD_S) is None and not running.cancelled()
    assert all(q.cancelled() for q in queued)


def test_a_pool_needs_a_thread():
    with pytest.raises(ValueError):
        PrestartedPool(max_workers=0)
