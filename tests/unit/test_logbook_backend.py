"""fleetflow's TaskFlow logbook backend on SQLite: TaskFlow's contract, round trips, resume."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import unittest
import uuid

import pytest
import sqlalchemy as sa
from taskflow import exceptions as tf_exc
from taskflow.persistence import backends as tf_backends
from taskflow.persistence import models
from taskflow.tests.unit.persistence import base as tf_contract

from fleetflow.persistence.logbook.backend import LogbookBackend

CONTRACT_TESTS = sorted(name for name in dir(tf_contract.PersistenceTestMixin)
                        if name.startswith("test_"))


class _Contract(tf_contract.PersistenceTestMixin, unittest.TestCase):
    """TaskFlow's own persistence tests, pointed at a backend given by the fixture."""

    __test__ = False  # run through test_taskflow_persistence_contract only
    backend = None

    def _get_connection(self):
        return self.backend.get_connection()


@pytest.fixture
def backend(url):
    be = tf_backends.fetch({"connection": "fleetflow+" + url})
    yield be
    be.close()


@pytest.mark.parametrize("name", CONTRACT_TESTS)
def test_taskflow_persistence_contract(backend, name):
    case = _Contract(methodName=name)
    case.backend = backend
    getattr(case, name)()


def test_entry_point_gives_our_backend_and_validate_works(backend):
    assert isinstance(backend, LogbookBackend)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.validate()
        conn.upgrade()  # idempotent


def _saved_flow(backend, atoms=3):
    book = models.LogBook("book")
    fd = models.FlowDetail("flow", uuid=str(uuid.uuid4()))
    book.add(fd)
    for i in range(atoms):
        fd.add(models.TaskDetail(f"t{i}", uuid=str(uuid.uuid4())))
    with contextlib.closing(backend.get_connection()) as conn:
        conn.save_logbook(book)
    return book, fd


@contextlib.contextmanager
def _statements(engine):
    """Every SQL statement SQLite itself runs on ``engine`` (via sqlite3's trace hook)."""
    seen: list[str] = []

    def trace(dbapi_conn, _record):
        dbapi_conn.set_trace_callback(seen.append)

    engine.dispose()  # new connections only, so each gets the hook
    sa.event.listen(engine, "connect", trace)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "connect", trace)
        engine.dispose()


def _work(statements):
    return [s for s in statements
            if not s.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK"))]


def test_atom_checkpoint_is_one_update_and_is_committed(backend, url):
    _book, fd = _saved_flow(backend)
    ad = next(iter(fd))
    ad.state = "RUNNING"
    ad.results = {"host": "h1"}
    with _statements(backend.engine) as seen, \
            contextlib.closing(backend.get_connection()) as conn:
        conn.update_atom_details(ad)
    # One UPDATE, in autocommit: not even a BEGIN / COMMIT pair.
    assert len(seen) == 1 and seen[0].lstrip().upper().startswith("UPDATE TF_ATOMDETAILS")
    # A second, independent engine (another process would see the same) reads it.
    other = LogbookBackend({"connection": url})
    with contextlib.closing(other.get_connection()) as conn:
        stored = conn.get_atom_details(ad.uuid)
    other.close()
    assert (stored.state, stored.results) == ("RUNNING", {"host": "h1"})


def test_missing_atom_update_raises_not_found(backend):
    with contextlib.closing(backend.get_connection()) as conn, pytest.raises(tf_exc.NotFound):
        conn.update_atom_details(models.TaskDetail("ghost", uuid=str(uuid.uuid4())))


def test_flow_update_rewrites_only_changed_atoms(backend):
    _book, fd = _saved_flow(backend, atoms=5)
    fd.state = "RUNNING"
    changed = list(fd)[2]
    changed.state = "SUCCESS"
    with _statements(backend.engine) as seen, \
            contextlib.closing(backend.get_connection()) as conn:
        conn.update_flow_details(fd)
    # UPDATE flow, SELECT its atoms, one UPDATE for the one changed atom.
    work = _work(seen)
    updates = [s for s in work if s.lstrip().upper().startswith("UPDATE TF_ATOMDETAILS")]
    assert len(work) == 3 and len(updates) == 1
    with contextlib.closing(backend.get_connection()) as conn:
        stored = conn.get_flow_details(fd.uuid)
    assert stored.state == "RUNNING"
    assert stored.find(changed.uuid).state == "SUCCESS"


def test_flow_update_returns_atoms_added_by_another_writer(backend):
    _book, fd = _saved_flow(backend, atoms=1)
    theirs = fd.copy()
    extra = models.TaskDetail("added-elsewhere", uuid=str(uuid.uuid4()))
    theirs.add(extra)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.update_flow_details(theirs)
        merged = conn.update_flow_details(fd)  # ours does not know "extra"
    assert merged.find(extra.uuid) is not None
    assert fd.find(extra.uuid) is None  # the caller's object is left alone


def test_destroy_logbook_removes_flows_and_atoms(backend):
    book, fd = _saved_flow(backend)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.destroy_logbook(book.uuid)
        with pytest.raises(tf_exc.NotFound):
            conn.get_flow_details(fd.uuid)
        assert list(conn.get_atoms_for_flow(fd.uuid)) == []
        with pytest.raises(tf_exc.NotFound):
            conn.destroy_logbook(book.uuid)


def test_database_errors_become_storage_failure(tmp_path):
    # No schema: every statement fails, which TaskFlow's storage retries on.
    be = LogbookBackend({"connection": f"fleetflow+sqlite:///{tmp_path / 'empty.db'}"})
    with contextlib.closing(be.get_connection()) as conn, pytest.raises(tf_exc.StorageFailure):
        conn.get_logbook("nope")
    be.close()


# The same flow in the crashing child process and in the test: six tasks in a
# line; each appends its name to a log after its work; "t3" SIGKILLs its own
# process when CRASH is set, before logging.
FLOW_SOURCE = textwrap.dedent("""
    import os, signal
    from taskflow import task
    from taskflow.patterns import linear_flow

    class Step(task.Task):
        def __init__(self, name, log):
            super().__init__(name)
            self.log = log

        def execute(self):
            if self.name == "t3" and os.environ.get("CRASH"):
                os.kill(os.getpid(), signal.SIGKILL)
            with open(self.log, "a") as f:
                f.write(self.name + "\\n")

    def build(log):
        return linear_flow.Flow("six").add(*(Step(f"t{i}", log) for i in range(6)))
""")

CHILD = FLOW_SOURCE + textwrap.dedent("""
    import sys, contextlib
    from taskflow.persistence import backends
    from fleetflow.engine import engines
    url, fd_uuid, log = sys.argv[1:4]
    backend = backends.fetch({"connection": "fleetflow+" + url})
    with contextlib.closing(backend.get_connection()) as conn:
        fd = conn.get_flow_details(fd_uuid)
    engines.make_engine(build(log), fd, backend, engine="serial").run()
""")


def test_flow_killed_half_way_resumes_from_its_checkpoints(backend, url, tmp_path):
    _book, fd = _saved_flow(backend, atoms=0)
    log = tmp_path / "executed.log"
    env = dict(os.environ, CRASH="1")
    proc = subprocess.run([sys.executable, "-c", CHILD, url, fd.uuid, str(log)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert log.read_text().split() == ["t0", "t1", "t2"]

    # A fresh engine (new backend object, flow detail read back from the
    # database) in this process finishes the flow.
    namespace: dict = {}
    exec(FLOW_SOURCE, namespace)  # noqa: S102 - the same flow definition as the child
    from fleetflow.engine import engines

    fresh = LogbookBackend({"connection": url})
    with contextlib.closing(fresh.get_connection()) as conn:
        loaded = conn.get_flow_details(fd.uuid)
    assert {ad.name: ad.state for ad in loaded}["t2"] == "SUCCESS"
    eng = engines.make_engine(namespace["build"](str(log)), loaded, fresh, engine="serial")
    eng.run()
    fresh.close()
    # t0..t2 were not run again; t3 (RUNNING when killed) and the rest were.
    assert log.read_text().split() == ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert eng.storage.get_flow_state() == "SUCCESS"


def test_an_injector_left_half_written_by_a_kill_loads_and_takes_injections(backend):
    # TaskFlow's Storage.inject first saves the flow detail holding a new, empty
    # injector detail, then the detail with the values: a conductor killed between
    # the two writes leaves results None, which Storage() itself cannot load.
    from taskflow import storage as tf_storage

    _book, fd = _saved_flow(backend)
    half_written = models.TaskDetail(tf_storage.Storage.injector_name,
                                     uuid=str(uuid.uuid4()))
    assert half_written.results is None
    fd.add(half_written)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.update_flow_details(fd)
        stored = conn.get_flow_details(fd.uuid)

    store = tf_storage.Storage(stored, backend=backend)
    store.inject({"fence": {"key": "f", "token": 2}})

    with contextlib.closing(backend.get_connection()) as conn:
        again = tf_storage.Storage(conn.get_flow_details(fd.uuid), backend=backend)
    assert again.fetch("fence") == {"key": "f", "token": 2}
