"""The fleetflow engine's storage lock, retry loop and one validation, against stock's."""

from __future__ import annotations

import random
import threading

import pytest
from taskflow import engines as tf_engines
from taskflow import exceptions as tf_exc
from taskflow import retry, task
from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.plugin import storage as fast_storage
from fleetflow.plugin import validation
from fleetflow.plugin.storage import WriterReentrantLock

FAST = "fleetflow-parallel"


class Needs(task.Task):
    def execute(self, value):
        return value + 1


def test_the_writer_reads_and_reenters_without_becoming_a_reader():
    lock = WriterReentrantLock()
    with lock.write_lock():
        with lock.read_lock() as held:
            assert held is lock
            assert not lock.is_reader()
            with lock.write_lock():
                assert lock.is_writer()
        assert lock.is_writer()
    assert lock.owner is None


def test_other_threads_still_wait_for_the_writer():
    lock = WriterReentrantLock()
    read, write = threading.Event(), threading.Event()

    def reader():
        with lock.read_lock():
            read.set()

    def writer():
        with lock.write_lock():
            write.set()

    with lock.write_lock():
        with lock.read_lock():
            threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
            for t in threads:
                t.start()
            assert not read.wait(0.2) and not write.wait(0.01)
    assert read.wait(5) and write.wait(5)
    for t in threads:
        t.join(5)


def test_a_reader_still_cannot_become_the_writer():
    lock = WriterReentrantLock()
    with lock.read_lock(), pytest.raises(RuntimeError):
        with lock.write_lock():
            pass


def test_the_fleetflow_storage_uses_the_writer_reentrant_lock():
    engine = tf_engines.load(Needs("n", provides="out"), store={"value": 1}, engine=FAST)
    assert isinstance(engine.storage.lock, WriterReentrantLock)
    engine.run()
    assert engine.storage.fetch("out") == 2


def _count_validations(engine) -> dict:
    calls = {"n": 0}
    real = engine.storage.fetch_unsatisfied_args

    def counting(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    engine.storage.fetch_unsatisfied_args = counting
    return calls


def _conductor_like_run(engine):
    # The order a TaskFlow conductor uses: compile, prepare, validate, run.
    engine.compile()
    engine.prepare()
    engine.validate()
    engine.run()


def test_a_conductor_run_validates_once(monkeypatch):
    flow = linear_flow.Flow("f").add(*[Needs(f"n{i}") for i in range(5)])
    engine = tf_engines.load(flow, store={"value": 1}, engine=FAST)
    calls = {"n": 0}
    real = validation._ValidationLookups.missing

    def counting(self, *args):
        calls["n"] += 1
        return real(self, *args)

    monkeypatch.setattr(validation._ValidationLookups, "missing", counting)
    _conductor_like_run(engine)
    # Once per atom: its revert takes no name its execute did not.
    assert calls["n"] == 5


def test_stock_validates_twice():
    flow = linear_flow.Flow("f").add(*[Needs(f"n{i}") for i in range(5)])
    engine = tf_engines.load(flow, store={"value": 1}, engine="parallel")
    calls = _count_validations(engine)
    _conductor_like_run(engine)
    assert calls["n"] == 2 * 2 * 5


def test_missing_arguments_are_still_refused():
    engine = tf_engines.load(Needs("n"), engine=FAST)
    engine.compile()
    engine.prepare()
    with pytest.raises(tf_exc.MissingDependencies):
        engine.validate()
    with pytest.raises(tf_exc.MissingDependencies):
        engine.run()


def test_storage_failures_are_retried_as_taskflow_retries_them(monkeypatch):
    from taskflow import storage as tf_storage

    patches = fast_storage
    slept = []
    monkeypatch.setattr(patches.time, "sleep", slept.append)
    calls = []

    def flaky(fail_times):
        calls.append(1)
        if len(calls) <= fail_times:
            raise tf_exc.StorageFailure("backend away")
        return "saved"

    assert patches.retry_storage_failures(flaky, 2) == "saved"
    assert len(calls) == 3 and slept == [tf_storage.RETRY_WAIT_TIMEOUT] * 2
    calls.clear()
    slept.clear()
    with pytest.raises(tf_exc.StorageFailure):
        patches.retry_storage_failures(flaky, 10)
    assert len(calls) == tf_storage.RETRY_ATTEMPTS and len(slept) == tf_storage.RETRY_ATTEMPTS - 1
    calls.clear()

    def not_storage():
        calls.append(1)
        raise ValueError("not retried")

    with pytest.raises(ValueError):
        patches.retry_storage_failures(not_storage)
    assert len(calls) == 1


class ExecAndRevertDiffer(task.Task):
    """Revert needs a name execute does not, and execute has an optional one."""

    def execute(self, a, b=None):
        return a

    def revert(self, a, c, **kwargs):
        return None


def _causes(exc) -> list[str]:
    found = []
    while exc is not None:
        found.append(str(exc))
        exc = getattr(exc, "cause", None)
    return found


def _validation_answer(flow, store, engine_name):
    engine = tf_engines.load(flow, store=store, engine=engine_name)
    engine.compile()
    engine.prepare()
    try:
        engine.validate()
    except tf_exc.MissingDependencies as exc:
        return _causes(exc)
    return "valid"


@pytest.mark.parametrize("seed", range(20))
def test_validation_answers_as_stock_does(seed):
    import random

    rng = random.Random(seed)

    def flow():
        r = random.Random(seed)
        atoms = []
        for i in range(r.randint(1, 5)):
            rebind = {"a": r.choice(["a", "x", "y"])}
            if r.random() < 0.5:
                atoms.append(ExecAndRevertDiffer(f"t{i}", rebind=rebind,
                                                 revert_rebind={"c": r.choice(["c", "x"])}))
            else:
                atoms.append(Needs(f"t{i}", provides=r.choice(["x", "y", "value"])))
        return linear_flow.Flow("f").add(*atoms)

    store = {name: 1 for name in ("a", "b", "c", "x", "value") if rng.random() < 0.5}
    assert _validation_answer(flow(), store, FAST) == _validation_answer(flow(), store,
                                                                         "parallel")


class TakesTwo(task.Task):
    def execute(self, p, q=None):
        return p

    def revert(self, p, r, **kwargs):
        return None


class PassRetry(retry.AlwaysRevert):
    def execute(self, history, p=None):
        return "chosen"


NAMES = ["p", "q", "r", "s", "t", "u"]


def _nested_flow(seed):
    """Instances in an unordered flow, each a linear subflow with a retry that
    provides a name only its own atoms see; names bound, provided and injected
    at random, so some lookups cross scopes they cannot see."""
    r = random.Random(seed)

    def bind():
        return {"p": r.choice(NAMES), "q": r.choice(NAMES)}

    def maybe_inject():
        return {r.choice(NAMES): 1} if r.random() < 0.2 else None

    top = linear_flow.Flow("top")
    top.add(TakesTwo("first", rebind=bind(), revert_rebind={"r": r.choice(NAMES)},
                     provides=r.choice(NAMES), inject=maybe_inject()))
    instances = unordered_flow.Flow("instances")
    for i in range(r.randint(1, 4)):
        chain = linear_flow.Flow(f"i{i}", retry=PassRetry(
            f"i{i}-retry", provides=f"i{i}.x" if r.random() < 0.8 else r.choice(NAMES)))
        for step in range(r.randint(1, 3)):
            rebind = {"p": r.choice([f"i{i}.x"] * 6 + [f"i{(i + 1) % 4}.x", *NAMES]),
                      "q": r.choice(NAMES)}
            chain.add(TakesTwo(f"i{i}-{step}", rebind=rebind,
                               revert_rebind={"r": r.choice([f"i{i}.x", *NAMES])},
                               provides=r.choice([None, *NAMES]), inject=maybe_inject()))
        instances.add(chain)
    top.add(instances, TakesTwo("last", rebind=bind(), revert_rebind={"r": r.choice(NAMES)}))
    return top


@pytest.mark.parametrize("seed", range(40))
def test_validation_of_nested_scopes_answers_as_stock_does(seed):
    # Half the seeds inject every plain name: what is missing then is a scope matter.
    pick = random.Random(seed * 7)
    every = pick.random() < 0.5
    store = {name: 1 for name in NAMES if every or pick.random() < 0.7}
    assert _validation_answer(_nested_flow(seed), store, FAST) == _validation_answer(
        _nested_flow(seed), store, "parallel")
