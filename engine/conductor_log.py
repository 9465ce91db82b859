"""What TaskFlow's conductor loop logs, without a traceback per failed poll.

``BlockingConductor`` logs a board that fails while it looks for jobs with
``LOG.exception`` on every poll: an ERROR and its traceback every half
second for as long as Redis is down. The conductor hands TaskFlow this
logger instead. Such a failure is said once, then at most once a minute
with a count (``common/log_throttle.py``); the traceback goes to DEBUG. A
board that reports its own outages (the Redis board's ``outage``, which also
says when it is back) is left to say it.
"""

from __future__ import annotations

import logging
import sys

from fleetflow.common.log_throttle import ConditionLog

#: How TaskFlow's conductor loop starts the message of a failed poll.
BOARD_FAILURE = "Transient job board failure"


class ConductorLog(logging.LoggerAdapter):
    """``logger`` for TaskFlow's conductor loop, with failed polls rate-limited."""

    def __init__(self, logger: logging.Logger, jobboard, **throttle):
        super().__init__(logger, {})
        self._board_reports = getattr(jobboard, "outage", None) is not None
        self.board_outage = ConditionLog(
            logger, f"jobboard {getattr(jobboard, 'name', '')} unreachable",
            f"jobboard {getattr(jobboard, 'name', '')} reachable again", **throttle)

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
