"""fleetflow's TaskFlow logbook backend on the real PostgreSQL: contract, checkpoints, a run."""

from __future__ import annotations

import contextlib
import unittest
import uuid

import pytest
from taskflow import task
from taskflow.patterns import linear_flow, unordered_flow
from taskflow.persistence import backends as tf_backends
from taskflow.persistence import models
from taskflow.tests.unit.persistence import base as tf_contract

from fleetflow.engine import engines
from fleetflow.persistence.db import Database
from fleetflow.persistence.logbook.backend import LogbookBackend

CONTRACT_TESTS = sorted(name for name in dir(tf_contract.PersistenceTestMixin)
                        if name.startswith("test_"))


class _Contract(tf_contract.PersistenceTestMixin, unittest.TestCase):
    """TaskFlow's own persistence tests, pointed at a backend given by the test."""

    __test__ = False
    backend = None

    def _get_connection(self):
        return self.backend.get_connection()


@pytest.fixture
def backend(pg_url):
    Database(pg_url).upgrade()
    be = tf_backends.fetch({"connection": "fleetflow+" + pg_url, "pool_size": 4})
    yield be
    be.close()


def test_contract_on_postgresql(backend):
    # All of TaskFlow's persistence tests against one database (creating one
    # database per test would dominate the run time).
    for name in CONTRACT_TESTS:
        with contextlib.closing(backend.get_connection()) as conn:
            conn.clear_all()
        case = _Contract(methodName=name)
        case.backend = backend
        getattr(case, name)()


def test_checkpoint_is_visible_to_another_pool_at_once(backend, pg_url):
    assert isinstance(backend, LogbookBackend)
    book = models.LogBook("book")
    fd = models.FlowDetail("flow", uuid=str(uuid.uuid4()))
    ad = models.TaskDetail("t", uuid=str(uuid.uuid4()))
    fd.add(ad)
    book.add(fd)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.save_logbook(book)
        ad.state, ad.results = "SUCCESS", [1, {"a": "b"}]
        conn.update_atom_details(ad)
    other = LogbookBackend({"connection": pg_url, "pool_size": 1})
    with contextlib.closing(other.get_connection()) as conn:
        stored = conn.get_atom_details(ad.uuid)
    other.close()
    assert (stored.state, stored.results) == ("SUCCESS", [1, {"a": "b"}])


class Double(task.Task):
    def execute(self, value):
        return value * 2


def test_parallel_engine_runs_a_flow_with_checkpoints_on_postgresql(backend):
    flow = linear_flow.Flow("root").add(
        unordered_flow.Flow("many").add(
            *(Double(f"d{i}", inject={"value": i}, provides=f"out{i}") for i in range(20))))
    book = models.LogBook("book")
    fd = models.FlowDetail("flow", uuid=str(uuid.uuid4()))
    book.add(fd)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.save_logbook(book)
    engines.make_engine(flow, fd, backend, workers=4).run()
    with contextlib.closing(backend.get_connection()) as conn:
        stored = conn.get_flow_details(fd.uuid)
    assert stored.state == "SUCCESS"
    results = {ad.name: ad.results for ad in stored}
    assert results == {f"d{i}": i * 2 for i in range(20)}
