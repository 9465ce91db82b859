"""The fleetflow engine stores checkpoints in batches, always before what they lead to runs."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from taskflow import engines as tf_engines
from taskflow import exceptions as tf_exc
from taskflow import retry, task
from taskflow import states as st
from taskflow import storage as tf_storage
from taskflow.patterns import linear_flow, unordered_flow
from taskflow.persistence import backends as tf_backends
from taskflow.persistence import models
from taskflow.utils import persistence_utils

from fleetflow.persistence.logbook.backend import LogbookConnection

FAST = "fleetflow-parallel"
WAIT_S = 30


@pytest.fixture
def backend(url):
    be = tf_backends.fetch({"connection": "fleetflow+" + url})
    yield be
    be.close()


def stored(backend, flow_detail) -> dict:
    """Atom name -> state, as the database holds them now."""
    with contextlib.closing(backend.get_connection()) as conn:
        return {ad.name: ad.state for ad in conn.get_atoms_for_flow(flow_detail.uuid)}


def load(flow, backend, engine=FAST, **options):
    book = models.LogBook("book")
    flow_detail = persistence_utils.create_flow_detail(flow, book=book, backend=backend)
    return tf_engines.load(flow, flow_detail=flow_detail, book=book, backend=backend,
                           engine=engine, **options)


class Probe(task.Task):
    """Compares, whenever it starts, what is stored with what the engine has decided."""

    def __init__(self, name, seen: list, fail_times: int = 0, **kwargs):
        super().__init__(name, **kwargs)
        self._seen = seen
        self._fail_times = fail_times
        self.engine = None

    def _look(self, what: str) -> None:
        storage = self.engine.storage
        in_memory = {ad.name: ad.state for ad in storage._flowdetail}
        self._seen.append((self.name, what, stored(storage._backend, storage._flowdetail),
                           in_memory))

    def execute(self):
        self._look("execute")
        if self._fail_times > 0:
            self._fail_times -= 1
            raise RuntimeError(f"{self.name} fails on purpose")

    def revert(self, *args, **kwargs):
        self._look("revert")


def test_every_atom_starts_with_all_decisions_so_far_stored(backend):
    seen: list = []
    probes = [Probe("a", seen), Probe("b", seen, fail_times=1), Probe("c", seen)]
    flow = linear_flow.Flow("f", retry=retry.Times(2, "r")).add(*probes)
    engine = load(flow, backend)
    for probe in probes:
        probe.engine = engine
    engine.run()

    # a, b (fails), b and a reverted, then a, b, c again.
    assert [(name, what) for name, what, _, _ in seen] == [
        ("a", "execute"), ("b", "execute"), ("b", "revert"), ("a", "revert"),
        ("a", "execute"), ("b", "execute"), ("c", "execute")]
    for name, what, in_database, in_memory in seen:
        # A linear flow runs one atom at a time: nothing is undecided.
        assert in_database == in_memory, (name, what)
        assert in_database[name] == (st.RUNNING if what == "execute" else st.REVERTING)
    assert set(stored(backend, engine.storage._flowdetail).values()) == {st.SUCCESS}


class WaitForStored(task.Task):
    """Succeeds once the database shows ``other`` as SUCCESS (while this task still runs)."""

    def __init__(self, name, other: str, backend, holder: dict):
        super().__init__(name)
        self._other, self._backend, self._holder = other, backend, holder

    def execute(self):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if stored(self._backend, self._holder["fd"]).get(self._other) == st.SUCCESS:
                return True
            time.sleep(0.01)
        return False


class Quick(task.Task):
    def execute(self):
        return 1


def test_completions_are_stored_before_the_engine_waits(backend):
    holder: dict = {}
    flow = unordered_flow.Flow("f").add(
        Quick("quick"), WaitForStored("slow", "quick", backend, holder))
    engine = load(flow, backend)
    holder["fd"] = engine.storage._flowdetail
    engine.run()
    assert engine.storage.get("slow") is True


def count_calls(monkeypatch, cls, name: str) -> list:
    calls: list = []
    stock = getattr(cls, name)

    def counted(self, *args, **kwargs):
        calls.append(threading.get_ident())
        return stock(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


def run_wide_flow(backend, width: int, engine_name: str) -> tuple[dict, dict]:
    flow = unordered_flow.Flow("wide").add(*(Quick(f"t{i}", provides=f"r{i}")
                                            for i in range(width)))
    engine = load(flow, backend, engine=engine_name, max_workers=8)
    engine.run()
    fd = engine.storage._flowdetail
    with contextlib.closing(backend.get_connection()) as conn:
        results = {ad.name: ad.results for ad in conn.get_atoms_for_flow(fd.uuid)}
    return stored(backend, fd), results


def test_batches_store_what_stock_stores_in_fewer_commits(backend, monkeypatch):
    single = count_calls(monkeypatch, LogbookConnection, "update_atom_details")
    many = count_calls(monkeypatch, LogbookConnection, "update_atom_details_many")
    patched_states, patched_results = run_wide_flow(backend, 40, FAST)
    assert not single and 0 < len(many) < 40

    single.clear()
    many.clear()
    stock_states, stock_results = run_wide_flow(backend, 40, "parallel")
    assert not many and len(single) >= 80  # RUNNING and SUCCESS of each task, at least
    assert patched_states == stock_states
    assert patched_results == stock_results
    assert set(patched_states.values()) == {st.SUCCESS}


def test_a_checkpoint_batch_that_cannot_be_stored_runs_nothing(backend, monkeypatch):
    monkeypatch.setattr(tf_storage, "RETRY_WAIT_TIMEOUT", 0)
    ran: list = []

    class Recorded(task.Task):
        def execute(self):
            ran.append(self.name)

    def refuse(self, atom_details):
        raise tf_exc.StorageFailure("the database is gone")

    flow = linear_flow.Flow("f").add(Recorded("a"), Recorded("b"))
    engine = load(flow, backend)
    monkeypatch.setattr(LogbookConnection, "update_atom_details_many", refuse)
    with pytest.raises(tf_exc.StorageFailure):
        engine.run()
    assert ran == []


def test_saves_from_other_threads_are_stored_at_once(backend):
    holder: dict = {}

    class Progress(task.Task):
        def execute(self):
            self.update_progress(0.5)
            fd = holder["fd"]
            with contextlib.closing(backend.get_connection()) as conn:
                ad = next(a for a in conn.get_atoms_for_flow(fd.uuid) if a.name == self.name)
            return ad.meta.get("progress")

    engine = load(linear_flow.Flow("f").add(Progress("p")), backend)
    holder["fd"] = engine.storage._flowdetail
    engine.run()
    assert engine.storage.get("p") == 0.5


def test_a_success_is_held_until_a_barrier_or_flush_checkpoints(backend):
    flow = linear_flow.Flow("f").add(Quick("a"), Quick("b"))
    engine = load(flow, backend)
    fd = engine.storage._flowdetail
    seen: list = []

    def on_success(state, details):
        if details["task_name"] == "a":
            seen.append(stored(backend, fd)["a"])  # held: still RUNNING in the database
            engine.storage.flush_checkpoints()
            seen.append(stored(backend, fd)["a"])

    engine.atom_notifier.register(st.SUCCESS, on_success)
    engine.run()
    assert seen == [st.RUNNING, st.SUCCESS]


def test_the_stock_engine_stores_each_checkpoint_at_once(backend):
    flow = linear_flow.Flow("f").add(Quick("a"), Quick("b"))
    engine = load(flow, backend, engine="parallel")
    fd = engine.storage._flowdetail
    seen: list = []
    engine.atom_notifier.register(
        st.SUCCESS, lambda state, details: seen.append(stored(backend, fd)[details["task_name"]]))
    engine.run()
    assert seen == [st.SUCCESS, st.SUCCESS]
    assert not hasattr(engine.storage, "flush_checkpoints")


def stored_flow(backend, flow_detail) -> tuple:
    """(state, meta minus the engine's record) of the flow as the database holds it."""
    with contextlib.closing(backend.get_connection()) as conn:
        fd = conn.get_flow_details(flow_detail.uuid)
    meta = {k: v for k, v in (fd.meta or {}).items() if k not in ("engine", "checkpoints")}
    return fd.state, meta


def test_the_flows_own_saves_write_its_row_alone_and_store_what_stock_stores(
        backend, monkeypatch):
    whole = count_calls(monkeypatch, LogbookConnection, "update_flow_details")
    alone = count_calls(monkeypatch, LogbookConnection, "update_flow_fields")
    fast_states, fast_results = run_wide_flow(backend, 20, FAST)
    fast_engine_whole = len(whole)
    assert alone  # RUNNING, SUCCESS, the engine's record: the flow's row only
    assert fast_engine_whole <= 1  # atoms added when the engine first prepares the flow

    alone.clear()
    stock_states, stock_results = run_wide_flow(backend, 20, "parallel")
    assert not alone
    assert fast_states == stock_states
    assert fast_results == stock_results


def test_a_flow_state_saved_alone_reaches_the_database(backend):
    flow = linear_flow.Flow("one").add(Quick("t0", provides="r0"))
    engine = load(flow, backend, engine=FAST)
    engine.run()
    fd = engine.storage._flowdetail
    assert stored_flow(backend, fd)[0] == st.SUCCESS
    engine.storage.set_flow_state(st.SUSPENDED)
    engine.storage.update_flow_metadata({"marked": True})
    state, meta = stored_flow(backend, fd)
    assert (state, meta.get("marked")) == (st.SUSPENDED, True)
    assert stored(backend, fd) == {"t0": st.SUCCESS}
