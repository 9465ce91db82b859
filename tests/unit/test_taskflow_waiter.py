"""The fleetflow engine's completion queue waits like stock ``wait_for_any``."""

from __future__ import annotations

import random
import threading
from concurrent import futures

import pytest
from futurist import waiters
from taskflow import engines as tf_engines
from taskflow import states as st
from taskflow import task
from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.plugin.waiter import CompletionWaiter

# Generous bound for a thread that must finish: a hang guard, not a speed check.
HANG_GUARD_S = 60


def stock_wait(fs, timeout=None):
    return waiters.wait_for_any(fs, timeout=timeout)


def finish(fut, rng: random.Random | None = None) -> None:
    if rng is not None and rng.random() < 0.3:
        fut.set_exception(RuntimeError("boot failed"))
    else:
        fut.set_result("ok")


def in_thread(function, *args):
    """Run ``function(*args)`` in a thread that must end; return its result."""
    box = {}

    def run():
        box["result"] = function(*args)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), "the wait never returned"
    return box["result"]


def test_each_fleetflow_engine_waits_on_a_queue_of_its_own_and_stock_does_not():
    stock = tf_engines.load(unordered_flow.Flow("f").add(Quick("a")), engine="parallel")
    stock.compile()
    assert stock._runtime.builder._waiter is waiters.wait_for_any

    engines = [tf_engines.load(unordered_flow.Flow("f").add(Quick("a")),
                               engine="fleetflow-parallel") for _ in range(2)]
    for engine in engines:
        engine.compile()
    # The checkpoint buffer wraps the waiter to store checkpoints before each wait.
    first, second = (e._runtime.builder._waiter.inner for e in engines)
    assert isinstance(first, CompletionWaiter) and isinstance(second, CompletionWaiter)
    assert first is not second
    assert engines[0]._runtime.builder is engines[0]._runtime.builder  # cached as stock


@pytest.mark.parametrize("seed", range(8))
def test_same_done_and_not_done_as_stock_step_by_step(seed):
    """Futures are scheduled, completed, dropped and re-added; both waiters agree."""
    rng = random.Random(seed)
    waiter = CompletionWaiter()
    mine, theirs = set(), set()
    pending: list[futures.Future] = []
    finished: list[futures.Future] = []
    for _ in range(200):
        for _ in range(rng.randint(0, 4)):
            fut = futures.Future()
            pending.append(fut)
            mine.add(fut)
            theirs.add(fut)
        for _ in range(rng.randint(0, 3)):
            if pending:
                fut = pending.pop(rng.randrange(len(pending)))
                finish(fut, rng)
                finished.append(fut)
        if rng.random() < 0.1 and mine:
            dropped = rng.choice(sorted(mine, key=id))
            mine.discard(dropped)
            theirs.discard(dropped)
        if rng.random() < 0.1 and finished:
            back = rng.choice(finished)  # a done future handed back in
            mine.add(back)
            theirs.add(back)
        expected = stock_wait(set(theirs), timeout=0)
        given = mine
        done, mine = waiter(mine, timeout=0)
        assert mine is given  # the caller's set, with done taken out
        assert done == expected.done
        assert mine == expected.not_done
        theirs = set(expected.not_done)
        assert done == {f for f in given | done if f.done()}


def test_timeout_with_nothing_done_returns_empty_done():
    waiter = CompletionWaiter()
    fs = {futures.Future() for _ in range(5)}
    snapshot = set(fs)
    done, not_done = waiter(fs, timeout=0.05)
    assert done == set() and not_done == snapshot and not_done is fs
    assert stock_wait(set(snapshot), timeout=0.05) == (set(), snapshot)


def test_empty_set_returns_at_once_like_stock():
    assert in_thread(CompletionWaiter(), set()) == (set(), set())
    assert in_thread(stock_wait, set()) == (set(), set())


def test_already_done_futures_are_returned_at_once():
    waiter = CompletionWaiter()
    ready = [futures.Future() for _ in range(3)]
    for fut in ready:
        fut.set_result(1)
    waiting = futures.Future()
    fs = set(ready) | {waiting}
    # No timeout: this would block forever if the done ones were not noticed.
    done, not_done = in_thread(waiter, fs)
    assert done == set(ready) and not_done == {waiting}
    assert in_thread(stock_wait, set(ready) | {waiting}) == (set(ready), {waiting})


def test_a_completion_wakes_a_waiter_blocked_without_timeout():
    waiter = CompletionWaiter()
    first, second = futures.Future(), futures.Future()
    started = threading.Event()

    def wait():
        started.set()
        return waiter({first, second})

    box = {}
    thread = threading.Thread(target=lambda: box.update(result=wait()), daemon=True)
    thread.start()
    started.wait()
    second.set_exception(RuntimeError("x"))
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
    assert box["result"] == ({second}, {first})


def test_non_set_arguments_go_to_stock_untouched():
    done_fut, pending = futures.Future(), futures.Future()
    done_fut.set_result(1)
    fs = [done_fut, pending]
    result = CompletionWaiter()(fs, timeout=0)
    assert result == ({done_fut}, {pending})
    assert fs == [done_fut, pending]


def test_a_cancelled_future_is_done_when_cancel_returns():
    """Stock reports it once the executor drops it; the queue as soon as it is cancelled."""
    fut, other = futures.Future(), futures.Future()
    assert fut.cancel()
    assert stock_wait({fut, other}, timeout=0) == (set(), {fut, other})
    assert CompletionWaiter()({fut, other}, timeout=0) == ({fut}, {other})
    assert fut.set_running_or_notify_cancel() is False  # what the executor does
    assert stock_wait({fut, other}, timeout=0) == ({fut}, {other})


@pytest.mark.parametrize("seed", range(3))
def test_concurrent_completions_are_each_returned_exactly_once(seed):
    """16 threads complete futures while the waiter keeps adding new ones."""
    rng = random.Random(seed)
    waiter = CompletionWaiter()
    to_complete: list[list[futures.Future]] = [[] for _ in range(16)]
    lock = threading.Lock()
    scheduled: list[futures.Future] = []
    go = threading.Barrier(17)
    stop = threading.Event()

    def completer(index: int) -> None:
        local = random.Random(seed * 100 + index)
        go.wait()
        while not stop.is_set() or to_complete[index]:
            with lock:
                batch, to_complete[index] = to_complete[index], []
            for fut in batch:
                finish(fut, local)
            if not batch:
                stop.wait(0.001)

    def schedule(count: int, not_done: set) -> None:
        with lock:
            for _ in range(count):
                fut = futures.Future()
                scheduled.append(fut)
                not_done.add(fut)
                to_complete[rng.randrange(16)].append(fut)

    threads = [threading.Thread(target=completer, args=(i,), daemon=True) for i in range(16)]
    for thread in threads:
        thread.start()
    not_done: set = set()
    schedule(300, not_done)
    go.wait()
    returned: list[futures.Future] = []
    while len(returned) < 1000:
        done, not_done = waiter(not_done, timeout=HANG_GUARD_S)
        assert done, "no completion within the hang guard"
        assert all(f.done() for f in done)
        assert not done & not_done
        returned.extend(done)
        if len(scheduled) < 1000:
            schedule(min(len(done) * 2, 1000 - len(scheduled)), not_done)
    stop.set()
    for thread in threads:
        thread.join(HANG_GUARD_S)
    assert len(returned) == len(set(returned)) == 1000
    assert set(returned) == set(scheduled)
    assert not_done == set()


class CountingLock:
    """A lock that counts how often it is taken."""

    def __init__(self, counter: list):
        self._lock = threading.Lock()
        self._counter = counter

    def acquire(self, blocking=True, timeout=-1):
        self._counter[0] += 1
        return self._lock.acquire(blocking, timeout)

    def release(self):
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *exc):
        self.release()


def counting_futures(count: int, counter: list) -> list[futures.Future]:
    made = []
    for _ in range(count):
        fut = futures.Future()
        fut._condition = threading.Condition(CountingLock(counter))
        made.append(fut)
    return made


@pytest.mark.parametrize("waiter_factory", [lambda: stock_wait, CompletionWaiter],
                         ids=["stock", "queue"])
def test_future_locks_taken_per_completion(waiter_factory):
    """N futures outstanding, completed one at a time: stock takes every outstanding
    future's lock on each wait (twice when it has to block, as the engine's does),
    O(N^2) in all; the queue takes a constant number per future."""
    n = 300
    counter = [0]
    pending = counting_futures(n, counter)
    waiter = waiter_factory()
    not_done = set(pending)
    for fut in pending:
        fut.set_result(None)
        done, not_done = waiter(not_done, timeout=0)
        assert done == {fut}
    assert not_done == set()
    if waiter is stock_wait:
        assert counter[0] > n * n / 2
    else:
        assert counter[0] <= 5 * n


class Quick(task.Task):
    def execute(self):
        return self.name


class Rendezvous(task.Task):
    """Returns only once every task of the flow is running at the same time."""

    def __init__(self, name, barrier, pause):
        super().__init__(name)
        self._barrier = barrier
        self._pause = pause

    def execute(self):
        self._barrier.wait()
        self._pause.wait(0.05)
        return self.name


def rendezvous_flow(count: int) -> linear_flow.Flow:
    barrier, pause = threading.Barrier(count, timeout=HANG_GUARD_S), threading.Event()
    tasks = unordered_flow.Flow("boots").add(
        *(Rendezvous(f"boot-{i}", barrier, pause) for i in range(count)))
    return linear_flow.Flow("reservation").add(Quick("schedule"), tasks, Quick("finish"))


def run_rendezvous(count: int, engine_name: str) -> dict:
    engine = tf_engines.load(rendezvous_flow(count), engine=engine_name, max_workers=count)
    engine.run()
    return {name: (engine.storage.get_atom_state(name), engine.storage.get(name))
            for name in ["schedule", "finish"] + [f"boot-{i}" for i in range(count)]}


@pytest.mark.parametrize("engine_name", ["fleetflow-parallel", "parallel"])
def test_a_parallel_engine_runs_hundreds_of_concurrent_tasks(engine_name):
    count = 300
    outcome = run_rendezvous(count, engine_name)
    assert outcome == {name: (st.SUCCESS, name) for name in outcome}
    assert len(outcome) == count + 2
