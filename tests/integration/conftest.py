"""The distributed cloud the integration tests start: one fixture for all of them.

``distributed_cloud(fleet, **settings)`` starts the API, two conductors and a
compute agent on the real PostgreSQL, Redis and RabbitMQ (see
``distributed_cloud.start_cloud``) and stops every process it started when the
test ends, whatever happened in it.
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    # The test modules import their harness, distributed_cloud, by name.
    sys.path.insert(0, HERE)

from distributed_cloud import start_cloud  # noqa: E402


@pytest.fixture
def distributed_cloud(tmp_path, pg_url, redis_url, rabbit_url, free_port, wait_for_api):
    """``start(fleet, **settings)``: a started cloud; each is stopped after the test."""
    started = []

    def start(fleet: dict, **settings: str):
        procs = start_cloud(tmp_path, fleet, pg_url, redis_url, rabbit_url, free_port,
                            wait_for_api, **settings)
        started.append(procs)
        return procs

    yield start
    for procs in started:
        procs.stop_all()
