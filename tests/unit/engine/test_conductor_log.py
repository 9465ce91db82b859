"""An idle conductor while Redis is down: one ERROR, rate-limited reminders, one INFO.

Redis is reached through a TCP relay the test cuts and restores, so the
shared server never stops. The conductor's own loop polls the board; the
test only counts its idle waits to decide when to cut, restore and stop,
and moves the rate limiter's clock instead of waiting a minute.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
import uuid

import pytest
from taskflow import states as tf_states
from taskflow.patterns import unordered_flow

from fleetflow.common.exceptions import Conflict
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.log import ConductorLog
from fleetflow.engine.conductor.worker import make_conductor
from fleetflow.flows import registry
from fleetflow.flows.tasks.base import FleetTask

BOARD_LOGGER = "fleetflow.engine.jobboard.redis"
TASKFLOW_LOGGER = "taskflow.conductors.backends.impl_executor"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_idle_conductor_reports_a_redis_outage_once_then_rarely_then_its_end(
        make_conf, redis_url, tcp_proxy, memory_backend, caplog):
    proxy = tcp_proxy(urllib.parse.urlsplit(redis_url).port or 6379)
    conf = make_conf(jobboard={"backend": "redis", "board_name": f"quiet-{uuid.uuid4().hex}",
                               "redis_url": f"redis://127.0.0.1:{proxy.port}/0"})
    conductor = make_conductor(conf, "idle", persistence=memory_backend, wait_timeout=0.01)
    clock = Clock()
    conductor.jobboard.outage.throttle.clock = clock
    polls = {"count": 0}
    idle_wait = conductor._wait_timeout.wait

    def counted_wait():
        idle_wait()
        polls["count"] += 1
        n = polls["count"]
        if n == 3:
            proxy.stop()  # Redis is gone from here on
        elif n == 25:
            clock.now += 61  # a minute into the outage
        elif n == 50:
            proxy.start()
        elif n == 55:
            conductor.stop()
        clock.now += 0.5

    conductor._wait_timeout.wait = counted_wait
    caplog.set_level(logging.DEBUG, logger=BOARD_LOGGER)
    caplog.set_level(logging.DEBUG, logger=TASKFLOW_LOGGER)
    runner = threading.Thread(target=conductor.run, daemon=True)
    runner.start()
    runner.join(120)
    alive = runner.is_alive()
    conductor.stop()
    conductor.jobboard.close()

    assert not alive, "the conductor never stopped"
    loud = [(r.name, r.levelname, r.getMessage()) for r in caplog.records
            if r.levelno >= logging.INFO and r.name in (BOARD_LOGGER, TASKFLOW_LOGGER)]
    errors = [line for line in loud if line[1] == "ERROR"]
    assert len(errors) == 2, loud
    assert "unreachable: JobFailure: Failed to connect to redis" in errors[0][2]
    assert " unreachable for " in errors[1][2] and " since the last report" in errors[1][2]
    assert [line for line in loud if line[1] == "INFO"
            and "reachable again" in line[2]] != []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING and r.exc_info] == []
    # Every failed poll still leaves its traceback, at DEBUG.
    failed_polls = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info
                    and r.name == BOARD_LOGGER]
    assert len(failed_polls) >= 40


class BoardWithoutReports:
    name = "sql"


def test_a_board_that_reports_nothing_is_still_one_line_a_minute(caplog):
    logger = logging.getLogger("fleetflow.tests.conductor_log")
    clock = Clock()
    log = ConductorLog(logger, BoardWithoutReports(), clock=clock)
    caplog.set_level(logging.DEBUG, logger=logger.name)

    for _poll in range(300):
        try:
            raise ConnectionError("database gone")
        except ConnectionError:
            log.exception("Transient job board failure while iterating jobs; backing off "
                          "and retrying")
        clock.now += 0.5
    log.exception("something else entirely")

    loud = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno > logging.DEBUG]
    assert [level for level, _ in loud] == ["ERROR", "ERROR", "ERROR", "ERROR"]
    assert loud[0][1] == "jobboard sql unreachable: ConnectionError: database gone"
    assert loud[-1][1] == "something else entirely"


class NoHostLeft(Conflict):
    """What the scheduler raises when nothing fits (a fleetflow error: an expected end)."""

    code = "NO_VALID_HOST"


class Place(FleetTask):
    def __init__(self, name, error: str):
        super().__init__(name=name)
        self._error = error

    def execute(self):
        if self._error == "no-host":
            raise NoHostLeft("No valid host for instance 1 (placed 0, min_count 1)")
        raise KeyError("a bug")

    def revert(self, *args, **kwargs):
        pass


@registry.flow_factory("toy-placing")
def toy_placing(error: str, count: int = 1):
    """``count`` placements side by side: two that fail are two failures of one flow."""
    flow = unordered_flow.Flow("toy-placing")
    for index in range(count):
        flow.add(Place(f"inst-{index:04d}-place", error))
    return flow


def _run_one_job(conf, board, backend, flow_kwargs) -> None:
    flow_id = submit_mod.submit(board, backend, "toy-placing", flow_kwargs)
    conductor = make_conductor(conf, "placing", persistence=backend, wait_timeout=0.05)
    conductor.notifier.register("job_consumed", lambda _event, details: conductor.stop())
    runner = threading.Thread(target=conductor.run, daemon=True)
    runner.start()
    runner.join(60)
    alive = runner.is_alive()
    conductor.stop()
    conductor.close()
    assert not alive, "the job was never consumed"
    deadline = time.monotonic() + 10
    while submit_mod.load_status(backend, flow_id)["state"] != tf_states.REVERTED:
        assert time.monotonic() < deadline, "the flow did not revert"
        time.sleep(0.05)


def _warnings_and_worse(caplog):
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("count", [1, 2])
def test_a_flow_reverted_on_no_valid_host_is_one_line_its_traceback_at_debug(
        engine_conf, board, memory_backend, database, caplog, count):
    caplog.set_level(logging.DEBUG, logger=TASKFLOW_LOGGER)

    _run_one_job(engine_conf, board, memory_backend, {"error": "no-host", "count": count})

    loud = _warnings_and_worse(caplog)
    assert [r for r in loud if r.exc_info or "Traceback" in r.getMessage()] == []
    reasons = [r.getMessage() for r in loud if "No valid host" in r.getMessage()]
    assert len(reasons) == count, [r.getMessage() for r in loud]
    assert all(len(r.getMessage().splitlines()) == 1 for r in loud)
    assert [r for r in caplog.records if r.levelno == logging.DEBUG
            and (r.exc_info or "Traceback" in r.getMessage())] != []


def test_a_flow_that_failed_on_a_bug_keeps_its_traceback(engine_conf, board, memory_backend,
                                                         database, caplog):
    caplog.set_level(logging.DEBUG, logger=TASKFLOW_LOGGER)

    _run_one_job(engine_conf, board, memory_backend, {"error": "bug"})

    assert [r for r in _warnings_and_worse(caplog) if r.exc_info] != []
