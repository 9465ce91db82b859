"""The admitter: runs admission passes in a conductor process when capacity is freed.

Every process that runs conductors (``fleetflow conductor``, ``fleetflow
serve``) runs one. It looks at the capacity stamp every
``[queue] poll_interval`` (one query of aggregates, see
``persistence.queue.Stamp``) and runs a pass when the stamp says capacity may
have been freed — a delete, a revert, an evacuation's source released, a host
back ``up``, new inventory — or a request was queued, and every
``[queue] interval`` seconds as a safety net. Nothing runs while the queue is
empty. Of all the processes, the holder of the admission lease (a row of
``reconcile_leases``, keyed by the board) makes the passes: one at a time, so
two passes never hand out the same free capacity; a holder that dies loses the
lease when it lapses.
"""

from __future__ import annotations

import logging
import threading
import time

from fleetflow.persistence import intents
from fleetflow.persistence import queue as queue_rows
from fleetflow.services.queue import admission

LOG = logging.getLogger(__name__)


def lease_key(conf) -> str:
    return f"queue:{conf.jobboard.board_name}"[:64]


class Admitter:
    """One process's admission thread (see the module's docstring)."""

    def __init__(self, conf, database, ops, name: str):
        self.conf = conf
        self.database = database
        self.ops = ops
        self.name = f"{name}-admitter"
        self.interval = float(conf.queue.interval)
        self.poll = float(conf.queue.poll_interval)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: queue_rows.Stamp | None = None
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
        if self.interval > 0 and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, daemon=True, name=self.name)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def wake(self) -> None:
        """Run a pass now (a caller in this process knows capacity was freed)."""
        self._wake.set()

    def run_once(self) -> admission.PassResult | None:
        """One pass if this process holds the admission lease; None when another does."""
        with self.database.session() as session:
            held = queue_rows.waiting_count(session) and intents.take_lease(
                session, lease_key(self.conf), self.name, 3 * max(self.interval, 1.0))
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
            now_stamp = queue_rows.stamp(session)
        if not now_stamp.waiting:
            self._last = now_stamp
            return False
        due = (now_stamp.frees_capacity_since(self._last)
               or time.monotonic() - self._last_pass >= self.interval)
        self._last = now_stamp
        return due

    def _loop(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self.poll)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if self.due() or woken:
                    self._last_pass = time.monotonic()
                    self.run_once()
            except Exception:
                # The database is away: the next look tries again.
                LOG.warning("queue admission pass failed", exc_info=True)
