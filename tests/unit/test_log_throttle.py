"""The rate limiter every noisy source logs through, on a clock the test moves."""

from __future__ import annotations

import logging

import pytest

from fleetflow.common.log_throttle import ConditionLog, RepeatFilter, Throttle


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


def test_the_first_occurrence_passes_then_one_per_interval_with_the_count(clock):
    throttle = Throttle(interval=60, clock=clock)

    first = throttle.hit("redis")
    quiet = [throttle.hit("redis") for _ in range(99)]
    clock.now += 60
    reminder = throttle.hit("redis")

    assert first.first and first.count == 1
    assert quiet == [None] * 99
    assert not reminder.first
    assert (reminder.held, reminder.count, reminder.since, reminder.window) == (99, 101, 60, 60)
    clock.now += 90
    assert throttle.hit("redis").window == 90 and throttle.hit("redis") is None
    # Another condition has a budget of its own.
    assert throttle.hit("rabbit").first


def test_clear_ends_the_condition_and_says_what_it_was(clock):
    throttle = Throttle(interval=60, clock=clock)
    throttle.hit()
    clock.now += 5
    throttle.hit()
    clock.now += 2.5

    cleared = throttle.clear()

    assert (cleared.count, cleared.lasted) == (2, 7.5)
    assert throttle.clear() is None and not throttle.active()
    assert throttle.hit().first


def test_expire_forgets_only_a_condition_quiet_for_a_whole_interval(clock):
    throttle = Throttle(interval=60, clock=clock)
    throttle.hit("quiet")
    throttle.hit("busy")
    throttle.hit("busy")
    clock.now += 60

    throttle.expire()

    assert throttle.hit("quiet").first
    # Held-back occurrences are still owed their line, with their count.
    assert throttle.hit("busy").held == 1


def test_a_condition_log_says_down_once_reminds_with_a_count_and_says_up(clock, caplog):
    logger = logging.getLogger("fleetflow.tests.condition")
    condition = ConditionLog(logger, "board unreachable", "board reachable again",
                             interval=60, clock=clock)
    caplog.set_level(logging.DEBUG, logger=logger.name)

    for _poll in range(240):  # two minutes of polls every half second
        try:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379")
        except ConnectionError as error:
            condition.failed(error)
        clock.now += 0.5
    condition.recovered()
    condition.recovered()

    lines = [(r.levelname, r.getMessage()) for r in caplog.records
             if r.levelno > logging.DEBUG]
    assert lines == [
        ("ERROR", "board unreachable: ConnectionError: Error 111 connecting to "
                  "127.0.0.1:6379"),
        ("ERROR", "board unreachable for 60 s (121 failures, 120 since the last report): "
                  "ConnectionError: Error 111 connecting to 127.0.0.1:6379"),
        ("INFO", "board reachable again after 120.0 s (240 failures)")]
    assert all(r.exc_info is None for r in caplog.records if r.levelno > logging.DEBUG)
    tracebacks = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert len(tracebacks) == 240


def test_the_repeat_filter_holds_back_identical_records_and_counts_them(clock, caplog):
    logger = logging.getLogger("fleetflow.tests.repeats")
    repeats = RepeatFilter(interval=60, clock=clock)
    logger.addFilter(repeats)
    caplog.set_level(logging.DEBUG, logger=logger.name)
    template = "[%(connection_id)s] AMQP server on %(hostname)s is unreachable"
    try:
        for n in range(800):
            logger.error(template, {"connection_id": n, "hostname": "127.0.0.1"})
            if n == 400:
                logger.info("not held back: below WARNING")
            clock.now += 0.125
        logger.warning("another message is another condition")
    finally:
        logger.removeFilter(repeats)

    passed = [(r.levelname, r.getMessage()) for r in caplog.records
              if r.levelno > logging.DEBUG]
    assert passed == [
        ("ERROR", "[0] AMQP server on 127.0.0.1 is unreachable"),
        ("INFO", "not held back: below WARNING"),
        ("ERROR", "[480] AMQP server on 127.0.0.1 is unreachable (and 479 more like it in "
                  "the last 60 s)"),
        ("WARNING", "another message is another condition")]


def test_a_held_back_traceback_goes_to_debug(clock, caplog):
    logger = logging.getLogger("fleetflow.tests.tracebacks")
    repeats = RepeatFilter(interval=60, clock=clock)
    logger.addFilter(repeats)
    caplog.set_level(logging.DEBUG, logger=logger.name)
    try:
        for _attempt in range(3):
            try:
                raise ConnectionRefusedError(111, "Connection refused")
            except ConnectionRefusedError:
                logger.exception("reconnect failed")
            clock.now += 30
    finally:
        logger.removeFilter(repeats)

    shown = [(r.levelname, r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert shown == [
        ("ERROR", "reconnect failed", True),  # the first is whole
        ("DEBUG", "traceback of: reconnect failed", True),
        ("DEBUG", "traceback of: reconnect failed", True),
        ("ERROR", "reconnect failed (and 1 more like it in the last 60 s)", False)]
