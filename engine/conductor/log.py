"""What TaskFlow's conductor loop logs, without a traceback per failed poll or flow.

The conductor hands TaskFlow's ``BlockingConductor`` this logger instead of
its own, for two kinds of record that say one thing at great length:

- A board that fails while the loop looks for jobs is logged with
  ``LOG.exception`` on every poll: an ERROR and its traceback every half
  second for as long as Redis is down. It is said once, then at most once a
  minute with a count (``common/log_throttle.py``); the traceback goes to
  DEBUG. A board that reports its own outages (the Redis board's
  ``outage``, which also says when it is back) is left to say it.
- A flow that failed and was reverted is logged at WARNING with the whole
  traceback of its failure. When the failure is one of fleetflow's own
  errors (no valid host, a build that failed: an outcome the rows already
  record, not a bug) it is one WARNING line with the reason, and the
  traceback goes to DEBUG. Anything else keeps its traceback: it is a bug.
"""

from __future__ import annotations

import logging
import sys

from taskflow import exceptions as tf_exc

from fleetflow.common.exceptions import FleetflowError
from fleetflow.common.log_throttle import ConditionLog, first_line

#: How TaskFlow's conductor loop starts the message of a failed poll.
BOARD_FAILURE = "Transient job board failure"
#: How it starts the message of a job whose flow failed.
JOB_FAILED = "Job execution failed"
#: The message of each failure of a flow that failed more than once.
ONE_OF_FAILURES = "%s. %s"


def _expected(failure_or_error) -> bool:
    check = getattr(failure_or_error, "check", None)
    if check is not None:  # a TaskFlow Failure
        return check(FleetflowError) is not None
    return isinstance(failure_or_error, FleetflowError)


class ConductorLog(logging.LoggerAdapter):
    """``logger`` for TaskFlow's conductor loop: failed polls rate-limited, expected
    flow failures in one line."""

    def __init__(self, logger: logging.Logger, jobboard, **throttle):
        super().__init__(logger, {})
        self._board_reports = getattr(jobboard, "outage", None) is not None
        board = getattr(jobboard, "name", "")
        self.board_outage = ConditionLog(logger, f"jobboard {board} unreachable",
                                         f"jobboard {board} reachable again", **throttle)

    def exception(self, msg, *args, exc_info=True, **kwargs):
        if not str(msg).startswith(BOARD_FAILURE):
            super().exception(msg, *args, exc_info=exc_info, **kwargs)
            return
        error = sys.exc_info()[1]
        if self._board_reports:
            self.debug("%s", msg, exc_info=error)
        else:
            # Nothing says when such a board is back: a failure after a quiet
            # interval starts a new outage rather than continuing the last.
            self.board_outage.throttle.expire()
            self.board_outage.failed(error)

    def warning(self, msg, *args, **kwargs):
        error = sys.exc_info()[1]
        if str(msg).startswith(JOB_FAILED) and kwargs.get("exc_info") and _expected(error):
            self._one_line(msg % args, error)
            return
        if msg == ONE_OF_FAILURES and isinstance(error, tf_exc.WrappedFailure):
            number, _text = args
            failure = list(error)[number - 1]
            if _expected(failure):
                self.logger.warning("%s. %s", number, failure.exception_str)
                self.debug("%s. %s", *args)
                return
        super().warning(msg, *args, **kwargs)

    def _one_line(self, what: str, error: BaseException) -> None:
        self.debug("%s", what, exc_info=error)
        self.logger.warning("%s: %s", what, first_line(error))
