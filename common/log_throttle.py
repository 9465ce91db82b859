"""One log line per condition: repeats rate-limited and counted, tracebacks at DEBUG.

A dependency that is down (Redis, RabbitMQ, the database) makes every poll,
reconnect or request fail the same way, and logging each failure buries the
log: an idle conductor polls its jobboard twice a second, and oslo.messaging
logs each reconnect of each connection. Every such source logs through one
of these instead:

- :class:`Throttle` decides, for each key, whether an occurrence may be
  logged now: the first at once, then at most one per ``interval`` seconds,
  saying how many were held back meanwhile. Its clock is injected, so tests
  drive it without waiting.
- :class:`ConditionLog` tells one condition of one thing ("the jobboard is
  unreachable"): one line when it starts, rate-limited reminders with a count,
  one INFO line when it ends; the traceback of each failure only at DEBUG.
- :class:`RepeatFilter` is the same for a library's loggers we cannot change
  (oslo.messaging): identical records (logger, level, message template)
  beyond the first are held back for ``interval`` seconds, then one passes
  with the count, its traceback moved to DEBUG.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Hashable

DEFAULT_INTERVAL = 60.0


@dataclasses.dataclass
class _Condition:
    since: float  # first occurrence
    logged: float  # when a line about it was last allowed
    held: int = 0  # occurrences held back since then
    count: int = 1  # occurrences since it started


@dataclasses.dataclass(frozen=True)
class Hit:
    """An occurrence that may be logged."""

    first: bool  # the condition starts with it
    held: int  # occurrences held back since the previous line
    count: int  # occurrences since the condition started
    since: float  # seconds since it started
    window: float  # seconds since the previous line (the held ones are from it)


@dataclasses.dataclass(frozen=True)
class Cleared:
    count: int  # occurrences while it lasted
    lasted: float  # seconds from the first occurrence to its end


class Throttle:
    """Which occurrences of repeated conditions may be logged (thread-safe)."""

    def __init__(self, interval: float = DEFAULT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic):
        self.interval = float(interval)
        self.clock = clock  # public: tests drive it
        self._lock = threading.Lock()
        self._conditions: dict[Hashable, _Condition] = {}

    def hit(self, key: Hashable = None) -> Hit | None:
        """Count one occurrence of ``key``; the :class:`Hit` to log, or None to keep quiet."""
        now = self.clock()
        with self._lock:
            condition = self._conditions.get(key)
            if condition is None:
                self._conditions[key] = _Condition(since=now, logged=now)
                return Hit(first=True, held=0, count=1, since=0.0, window=0.0)
            condition.count += 1
            if now - condition.logged < self.interval:
                condition.held += 1
                return None
            held, window = condition.held, now - condition.logged
            condition.held, condition.logged = 0, now
            return Hit(first=False, held=held, count=condition.count,
                       since=now - condition.since, window=window)

    def active(self, key: Hashable = None) -> bool:
        """Whether ``key``'s condition is on (an occurrence since it was last cleared)."""
        with self._lock:
            return key in self._conditions

    def occurrences(self) -> dict[Hashable, int]:
        """How many times each condition now on has occurred."""
        with self._lock:
            return {key: c.count for key, c in self._conditions.items()}

    def clear(self, key: Hashable = None) -> Cleared | None:
        """End the condition of ``key``: what it was, or None if it was not on."""
        now = self.clock()
        with self._lock:
            condition = self._conditions.pop(key, None)
        if condition is None:
            return None
        return Cleared(count=condition.count, lasted=now - condition.since)

    def expire(self) -> None:
        """Forget conditions not seen for ``interval``: their next occurrence is a first."""
        now = self.clock()
        with self._lock:
            for key, condition in list(self._conditions.items()):
                if now - condition.logged >= self.interval and not condition.held:
                    del self._conditions[key]


def first_line(error: BaseException | None) -> str:
    """``Type: first line of the message``: what a one-line log says of an error."""
    if error is None:
        return ""
    text = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {text[0] if text else ''}"
    # A wrapper (TaskFlow's JobFailure) says little; what it wraps says why.
    cause = getattr(error, "cause", None) or error.__cause__
    if isinstance(cause, BaseException) and cause is not error:
        text = str(cause).strip().splitlines()
        line += f" ({type(cause).__name__}: {text[0] if text else ''})"
    return line


class ConditionLog:
    """The log of one condition of one thing: starts, goes on, ends.

    ``down`` and ``up`` are the messages (``"jobboard redis://... unreachable"``,
    ``"jobboard redis://... reachable again"``); ``level`` is the level of
    the lines that say it is down.
    """

    def __init__(self, logger: logging.Logger, down: str, up: str,
                 level: int = logging.ERROR, interval: float = DEFAULT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.down = down
        self.up = up
        self.level = level
        self.throttle = Throttle(interval, clock)

    @property
    def active(self) -> bool:
        """Whether the condition is on (a failure since the last :meth:`recovered`)."""
        return self.throttle.active()

    def failed(self, error: BaseException | None = None) -> None:
        """One more failure: a line if it is the first or the interval is over."""
        hit = self.throttle.hit()
        if self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug("%s: %s", self.down, first_line(error),
                              exc_info=error if error is not None else None)
        if hit is None:
            return
        if hit.first:
            self.logger.log(self.level, "%s: %s", self.down, first_line(error))
        else:
            self.logger.log(self.level, "%s for %.0f s (%d failures, %d since the last "
                            "report): %s", self.down, hit.since, hit.count, hit.held + 1,
                            first_line(error))

    def recovered(self) -> None:
        """It works again: one INFO line if it had failed."""
        cleared = self.throttle.clear()
        if cleared is not None:
            self.logger.info("%s after %.1f s (%d failures)", self.up, cleared.lasted,
                             cleared.count)


class RepeatFilter(logging.Filter):
    """Holds back repeats of the same WARNING-or-worse record of a logger.

    Records are the same when their logger, level and message template are:
    a reconnect of each of a hundred connections is one condition. The first
    passes as it is; the next ones are dropped (their traceback logged at
    DEBUG) until ``interval`` has passed, when one passes saying how many
    were held back. Lower levels pass untouched.
    """

    def __init__(self, interval: float = DEFAULT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.throttle = Throttle(interval, clock)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        self.throttle.expire()
        hit = self.throttle.hit((record.name, record.levelno, str(record.msg)))
        if hit is not None and hit.first:
            return True
        if record.exc_info:
            logging.getLogger(record.name).debug("traceback of: %s", record.getMessage(),
                                                 exc_info=record.exc_info)
        if hit is None:
            return False
        # The message is formatted here: the count must not meet the record's
        # own %-arguments (oslo.messaging passes a dict).
        record.msg = (f"{record.getMessage()} (and {hit.held} more like it in the last "
                      f"{hit.window:.0f} s)")
        record.args = None
        record.exc_info = record.exc_text = None
        return True


def install_repeat_filter(logger_names, interval: float = DEFAULT_INTERVAL) -> RepeatFilter:
    """One :class:`RepeatFilter` on each of ``logger_names`` (once per process)."""
    with _install_lock:
        found = _installed.get(tuple(logger_names))
        if found is None:
            found = _installed[tuple(logger_names)] = RepeatFilter(interval)
            for name in logger_names:
                logging.getLogger(name).addFilter(found)
        return found


_install_lock = threading.Lock()
_installed: dict[tuple, RepeatFilter] = {}
