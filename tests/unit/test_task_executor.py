"""The engine's executor: tasks that can start wait without holding a thread."""

import threading
from concurrent import futures

import pytest
from taskflow import engines as tf_engines
from taskflow import task
from taskflow.engines.action_engine import executor as tf_executor
from taskflow.patterns import linear_flow
from taskflow.types import failure

from fleetflow.engine import engines, taskflow_pool_patch
from fleetflow.engine.task_executor import StartingExecutor


class Waiter(task.Task):
    """start() hands back a future another thread settles; finish() adds one."""

    def __init__(self, name, pending, startable=True, fail_start=False, fail_finish=False,
                 **kwargs):
        super().__init__(name, **kwargs)
        self.pending = pending
        self.startable = startable
        self.fail_start = fail_start
        self.fail_finish = fail_finish
        self.threads = {}

    def can_start(self):
        return self.startable

    def start(self, value):
        self.threads["start"] = threading.current_thread().name
        if self.fail_start:
            raise ValueError("could not send")
        future = futures.Future()
        self.pending.append(future)
        return future

    def finish(self, started, value):
        self.threads["finish"] = threading.current_thread().name
        if self.fail_finish:
            raise ValueError("host said no")
        return started.result() + value

    def execute(self, value):
        self.threads["execute"] = threading.current_thread().name
        return self.finish(self.start(value), value)


@pytest.fixture
def executor():
    pool = futures.ThreadPoolExecutor(4, thread_name_prefix="pool")
    yield StartingExecutor(pool)
    pool.shutdown(wait=True)


def submit(executor, atom, **arguments):
    return executor.submit(tf_executor._execute_task, atom, arguments)


def test_a_startable_task_starts_here_and_finishes_on_the_pool(executor):
    pending = []
    atom = Waiter("w", pending)
    outcome = submit(executor, atom, value=1)
    assert atom.threads["start"] == threading.current_thread().name
    assert not outcome.done() and len(pending) == 1
    threading.Thread(target=pending[0].set_result, args=(41,)).start()
    assert outcome.result(timeout=5) == (tf_executor.EXECUTED, 42)
    assert atom.threads["finish"].startswith("pool")
    assert "execute" not in atom.threads


def test_other_tasks_run_on_the_pool_as_before(executor):
    pending = []
    atom = Waiter("w", pending, startable=False)
    outcome = submit(executor, atom, value=1)
    while not pending:
        threading.Event().wait(0.01)
    pending[0].set_result(1)
    assert outcome.result(timeout=5) == (tf_executor.EXECUTED, 2)
    assert atom.threads["execute"].startswith("pool")


@pytest.mark.parametrize("where", ["start", "finish"])
def test_a_failure_in_start_or_finish_is_the_tasks_failure(executor, where):
    pending = []
    atom = Waiter("w", pending, fail_start=where == "start", fail_finish=where == "finish")
    outcome = submit(executor, atom, value=1)
    if pending:
        pending[0].set_result(0)
    state, result = outcome.result(timeout=5)
    assert state == tf_executor.EXECUTED
    assert isinstance(result, failure.Failure) and result.check(ValueError)


def test_a_pool_shut_down_meanwhile_still_finishes_the_task():
    pool = futures.ThreadPoolExecutor(1)
    executor = StartingExecutor(pool)
    pending = []
    outcome = submit(executor, Waiter("w", pending), value=1)
    pool.shutdown(wait=True)
    pending[0].set_result(1)
    assert outcome.result(timeout=5) == (tf_executor.EXECUTED, 2)


def test_the_parallel_engine_runs_started_tasks_on_its_patched_pool():
    engines.engine_options()  # installs the patches
    assert taskflow_pool_patch.is_installed()
    pending = []
    atoms = [Waiter(f"w{i}", pending, provides=f"r{i}", inject={"value": i}) for i in range(20)]
    engine = tf_engines.load(linear_flow.Flow("f").add(*atoms[:1]).add(
        *[linear_flow.Flow(f"c{i}").add(a) for i, a in enumerate(atoms[1:], 1)]),
        engine="parallel", executor="threads", max_workers=2)

    def settle():
        settled = 0
        while settled < 20:
            if len(pending) > settled:
                pending[settled].set_result(100)
                settled += 1
            else:
                threading.Event().wait(0.005)

    settler = threading.Thread(target=settle)
    settler.start()
    engine.run()
    settler.join(5)
    assert [engine.storage.fetch(f"r{i}") for i in range(20)] == [100 + i for i in range(20)]
    # Every wait was a future, not a thread: start ran on the engine's own thread.
    assert {a.threads["start"] for a in atoms} == {threading.current_thread().name}
