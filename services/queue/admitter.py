"""The admitter: runs admission passes in a conductor process when capacity is freed.

Every process that runs conductors (``fleetflow conductor``, ``fleetflow
serve``) runs one. It looks at the capacity stamp every
``[queue] poll_interval`` (one query of aggregates, see
``persistence.queue.Stamp``) and runs a pass when the stamp says capacity may
have been freed — a delete, a revert, an evacuation's source released, a host
back ``up``, new inventory — or a request was queued, and every
``[queue] interval`` seconds as a safety net. While the queue is empty it
reads only how many requests wait (an indexed count), and runs nothing. Of all
the processes, the holder of the admission lease (a row of
``reconcile_leases``, keyed by the board) makes the passes: one at a time, so
two passes never hand out the same free capacity; a holder that dies loses the
lease when it lapses.
"""

from __future__ import annotations

import logging
import time

from fleetflow.common.periodic import Periodic
from fleetflow.persistence import intents
from fleetflow.persistence import queue as queue_rows
from fleetflow.services.queue import admission

LOG = logging.getLogger(__name__)


# While nothing waits, the stamp is looked at this often (seconds) rather than every
# [queue] poll_interval: an idle process then costs a count a second, not twenty. A
# request queued meanwhile waits at most this long for the first look (it was queued
# because it did not fit, so nothing it needs is free yet anyway).
IDLE_POLL = 1.0


def lease_key(conf) -> str:
    return f"queue:{conf.jobboard.board_name}"[:64]


class Admitter(Periodic):
    """One process's admission thread (see the module's docstring)."""

    def __init__(self, conf, database, ops, name: str):
        # The thread looks at the stamp every poll_interval; a pass is due at most
        # every [queue] interval without a trigger.
        super().__init__(f"{name}-admitter", conf.queue.poll_interval)
        self.conf = conf
        self.database = database
        self.ops = ops
        self.pass_interval = float(conf.queue.interval)
        self._last: queue_rows.Stamp | None = None
        self._idle = False  # the last look found nothing waiting
        self._last_pass = 0.0
        self.memo = admission.Memo()

    @classmethod
    def for_process(cls, conf, database, board, persistence, name: str) -> Admitter:
        """An admitter that posts admitted flows to ``board`` (as the API does)."""
        from fleetflow.engine.submit import Submitter
        from fleetflow.services.reservations import ReservationOps
        from fleetflow.services.vclusters import VClusterOps

        submit = Submitter(board, persistence)
        return cls(conf, database, {
            queue_rows.KIND_RESERVATION: ReservationOps(conf, database, submit),
            queue_rows.KIND_VCLUSTER: VClusterOps(conf, database, submit)}, name)

    def start(self) -> Admitter:
        if self.pass_interval > 0:  # [queue] interval 0: no admitter in this process
            super().start()
        return self

    def run_once(self) -> admission.PassResult | None:
        """One pass if this process holds the admission lease; None when another does."""
        with self.database.session() as session:
            held = queue_rows.waiting_count(session) and intents.take_lease(
                session, lease_key(self.conf), self.name, 3 * max(self.pass_interval, 1.0))
        if not held:
            return None
        result = admission.run_pass(self.conf, self.database, self.ops, memo=self.memo)
        if result.admitted or result.expired:
            LOG.info("queue: admitted %s, expired %s (examined %d)", result.admitted,
                     result.expired, result.examined)
        return result

    def due(self) -> bool:
        """Whether a pass is due now: capacity may have been freed, or the interval passed."""
        with self.database.read_session() as session:
            if self._idle and not queue_rows.waiting_count(session):
                # Nothing waits: one indexed count, not the stamp's sums over every
                # allocation and provider, which every idle process would read each second.
                return False
            now_stamp = queue_rows.stamp(session)
        if not now_stamp.waiting:
            self._last, self._idle = now_stamp, True
            return False
        # A request queued while idle is due at once (the stamp from before the idle
        # looks is stale; a new entry moved the largest seq in any case).
        due = (self._idle or now_stamp.frees_capacity_since(self._last)
               or time.monotonic() - self._last_pass >= self.pass_interval)
        self._last, self._idle = now_stamp, False
        return due

    def wait_seconds(self) -> float:
        return max(self.interval, IDLE_POLL) if self._idle else self.interval

    def tick(self, woken: bool) -> None:
        if self.due() or woken:
            self._last_pass = time.monotonic()
            self.run_once()
