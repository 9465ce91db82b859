"""Fixtures and toy flows for the engine's unit tests (TaskFlow's in-memory backend).

The toy flows are registered at import; their tasks record what they did in
``EFFECTS`` (a list guarded by a lock) so tests can count executions and
reverts exactly.
"""

from __future__ import annotations

import threading
import time

import pytest
from taskflow.patterns import linear_flow
from taskflow.persistence import backends as tf_backends

from fleetflow.flows import registry
from fleetflow.flows.tasks.base import FleetTask

EFFECTS: list[tuple[str, str, int | None]] = []
_effects_lock = threading.Lock()


def record(event: str, atom: str, token: int | None = None) -> None:
    with _effects_lock:
        EFFECTS.append((event, atom, token))


def effects(event: str | None = None) -> list[tuple[str, str, int | None]]:
    with _effects_lock:
        return [e for e in EFFECTS if event is None or e[0] == event]


class Step(FleetTask):
    """Records its execution (with the fence token it was given). Revert: records it."""

    def __init__(self, name, sleep=0.0, fail=False):
        super().__init__(name=name)
        self._sleep = sleep
        self._fail = fail

    def execute(self, fence, flow_id):
        if self._sleep:
            time.sleep(self._sleep)
        if self._fail:
            raise RuntimeError(f"{self.name} failed on purpose")
        record("execute", self.name, fence["token"])
        return self.name

    def revert(self, *args, **kwargs):
        record("revert", self.name)


@registry.flow_factory("toy-linear")
def toy_linear(count: int, fail_at: int = -1, sleep: float = 0.0):
    """count Step atoms in a line; the one at index fail_at raises."""
    flow = linear_flow.Flow("toy-linear")
    for index in range(count):
        flow.add(Step(f"inst-{index:04d}-step", sleep=sleep,
                      fail=index == fail_at))
    return flow


@pytest.fixture(autouse=True)
def _clear_effects():
    with _effects_lock:
        EFFECTS.clear()
    yield


@pytest.fixture
def memory_backend():
    backend = tf_backends.fetch({"connection": "memory://"})
    yield backend
    backend.close()


@pytest.fixture
def engine_conf(make_conf):
    """SQLite database for jobs and fences, short claims so expiry tests stay fast."""
    return make_conf(jobboard={"claim_expiry": 2, "keepalive_interval": 0.3},
                     conductor={"engine_workers": 4})


@pytest.fixture
def database(engine_conf):
    from fleetflow.persistence.db import get_database

    db = get_database(engine_conf)
    db.upgrade()
    return db


@pytest.fixture
def board(engine_conf, database, memory_backend):
    from fleetflow.engine.jobboard.boards import make_jobboard

    board = make_jobboard(engine_conf, memory_backend)
    yield board
    board.close()


@pytest.fixture
def effects_log():
    """Accessors for what the toy tasks did."""
    return effects

