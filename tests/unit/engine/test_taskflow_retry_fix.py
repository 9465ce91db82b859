"""engine/taskflow_retry_fix.py: a retry's history survives a round trip through storage."""

from __future__ import annotations

import pytest
from taskflow.persistence import backends as tf_backends
from taskflow.persistence import models as tf_models
from taskflow.types import failure as tf_failure

from fleetflow.engine import taskflow_retry_fix


def _failure(message):
    try:
        raise RuntimeError(message)
    except RuntimeError:
        return tf_failure.Failure()


def _round_trip():
    """Save a retry with a two-entry history in the in-memory backend; load it back."""
    backend = tf_backends.fetch({"connection": "memory://"})
    book = tf_models.LogBook("book")
    flow = tf_models.FlowDetail("flow", uuid="flow-1")
    retry = tf_models.RetryDetail("inst-0000-retry", uuid="retry-1")
    retry.results = [("host-a", {"inst-0000-boot": _failure("boot failed on host-a")}),
                     ("host-b", {})]
    flow.add(retry)
    book.add(flow)
    conn = backend.get_connection()
    conn.save_logbook(book)
    loaded = conn.get_flow_details("flow-1").find("retry-1")
    backend.close()
    return loaded


@pytest.fixture
def stock_taskflow():
    taskflow_retry_fix.remove()
    yield
    taskflow_retry_fix.apply()


def test_stock_taskflow_replaces_a_failed_value_by_the_failure(stock_taskflow):
    # Documents the bug the fix exists for: if TaskFlow fixes it, drop the fix.
    loaded = _round_trip()
    assert isinstance(loaded.results[0][0], dict)
    assert loaded.results[0][0]["exception_str"] == "boot failed on host-a"


def test_fixed_history_keeps_values_and_failures():
    taskflow_retry_fix.apply()
    taskflow_retry_fix.apply()  # idempotent
    assert taskflow_retry_fix.is_applied()
    loaded = _round_trip()
    assert [value for value, _ in loaded.results] == ["host-a", "host-b"]
    failure = loaded.results[0][1]["inst-0000-boot"]
    assert isinstance(failure, tf_failure.Failure)
    assert failure.exception_str == "boot failed on host-a"
    assert loaded.last_results == "host-b"
    assert isinstance(loaded, tf_models.RetryDetail)
