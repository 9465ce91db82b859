"""Which host one server's move tries next, and what happens when none is left.

Masakari's shape: a retry controller walks the server's candidate hosts
around its claim -> move -> attach -> confirm chain. A failed try is undone
by the chain's reverts (allocation back to the source, destination copy
gone) and the next candidate is tried; then up to ``max_reschedules`` hosts
chosen afresh. When none is left the retry records the server FAILED with
its fault, applies the evacuation's ``on_error`` and answers ``None`` ("no
host"), under which every task of the chain does nothing: a server that
cannot move never fails the flow, so finished moves are never reverted.

It also answers ``None`` when the evacuation is stopping (``on_error`` pause
or revert fired for another server): a server not started yet stays
PENDING (pause) or is REVERTED (revert).

The decision is :func:`next_host`; a group of servers (batch.py) asks it for
each member with what the retry's history would hold.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from taskflow import retry

from fleetflow.common import metrics, states
from fleetflow.flows import runtime
from fleetflow.flows.evacuate import gone, rows
from fleetflow.flows.evacuate.fastpath import CLAIMED
from fleetflow.flows.evacuate.move import MoveNotPossible
from fleetflow.flows.tasks.base import FleetRetry
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import reservations as reservation_rows
from fleetflow.persistence.models import Evacuation, Instance
from fleetflow.scheduler.moves import plan as move_plan

LOG = logging.getLogger(__name__)

NO_HOST = None


class MoveHostRetry(FleetRetry):
    """Provides the destination of one server's move; None when it will not move.

    Revert: nothing (the chain's tasks undo their effects).
    """

    def __init__(self, name: str, index: int, provides: str, max_reschedules: int = 2):
        super().__init__(name=name, provides=provides)
        self.index = index
        self.max_reschedules = max_reschedules

    def execute(self, history, move_placements: dict, evacuation_id: str,
                instance_uuids: list, fence=None) -> str | None:
        tried = [h for h in history.provided_iter() if h is not NO_HOST]
        return next_host(evacuation_id, instance_uuids[self.index], self.index, tried,
                         history.caused_by(MoveNotPossible), move_placements,
                         self.max_reschedules, fence)

    def on_failure(self, history, *args, **kwargs) -> str:
        if NO_HOST in list(history.provided_iter()):
            # The "no host" value itself failed: nothing sensible is left.
            return retry.REVERT_ALL
        # Always another try: execute decides (next host, a fresh one, or none,
        # also when the evacuation is stopping or the move was cancelled).
        return retry.RETRY

    def revert(self, history, *args, **kwargs) -> None:
        return None


def next_host(evacuation_id: str, uuid: str, index: int, tried: list[str],
              not_possible: bool, move_placements: dict, max_reschedules: int,
              fence=None) -> str | None:
    """The host of the server's next try (``tried``: the hosts of this run's failed
    tries); None when it will not move, recorded on its row."""
    rt = runtime.get()
    stopping = rows.stopping(rt.database, evacuation_id)
    if stopping:
        if not _skip_if_deleted(evacuation_id, uuid, fence):
            _leave(evacuation_id, uuid, stopping, fence)
        return NO_HOST
    if not_possible:
        if not _skip_if_deleted(evacuation_id, uuid, fence):
            _give_up(evacuation_id, uuid, None)
        return NO_HOST
    unplaced = (move_placements.get("unplaced") or {}).get(str(index))
    if unplaced and unplaced[0] != evac_rows.NO_VALID_HOST and not tried:
        # Not a matter of capacity: another host would not help.
        if not _skip_if_deleted(evacuation_id, uuid, fence):
            _give_up(evacuation_id, uuid, reservation_rows.fault(*unplaced, step="schedule"))
        return NO_HOST
    candidates = (move_placements.get("hosts") or {}).get(str(index), [])
    for host in candidates:
        if host not in tried:
            return host
    fresh = sum(1 for h in tried if h not in candidates)
    if fresh < max_reschedules:
        host, why = _reschedule(evacuation_id, uuid, tried)
        if host is not None:
            LOG.info("%s: candidates used up, rescheduled onto %s", uuid, host)
            return host
        unplaced = why
    fault = None
    if unplaced and not tried:
        fault = reservation_rows.fault(*unplaced, step="schedule")
    _give_up(evacuation_id, uuid, fault)
    return NO_HOST


def _reschedule(evacuation_id: str, uuid: str,
                tried: list[str]) -> tuple[str | None, tuple | None]:
    rt = runtime.get()
    usage = rt.placement.usages_by_provider()
    with rt.database.session() as session:
        evacuation = evac_rows.get(session, evacuation_id)
        plan = move_plan.plan(session, evacuation, [uuid], usage, rt.conf,
                              excluded_hosts=tried, alternates=0)
    candidates = plan.candidates.get(uuid)
    if candidates:
        return candidates[0], None
    return None, plan.unplaced.get(uuid)


def _skip_if_deleted(evacuation_id: str, uuid: str, fence) -> bool:
    """A server a delete took is SKIPPED, not FAILED: on_error must not fire for it.

    Asked only where a deleted server ends up (the schedule and the claim
    refuse it, a stopping run leaves it), not before every try: the
    common path reads no row more.
    """
    rt = runtime.get()
    if not gone.skip_if_gone(rt.placement, rt.database, evacuation_id, uuid, fence):
        return False
    LOG.info("evacuation %s: %s was deleted; its move is skipped", evacuation_id, uuid)
    return True


def _leave(evacuation_id: str, uuid: str, stopping: str, fence) -> None:
    """The evacuation stops: this server is not started (or its try was undone).

    A server the fast path claimed for, but whose chain never ran, still
    holds that claim: it is given back here.
    """
    rt = runtime.get()
    status = states.REVERTED if stopping == states.ON_ERROR_REVERT else states.PENDING
    with rt.database.session() as session:
        move = evac_rows.move(session, evacuation_id, uuid)
        claimed = move.status == states.MOVING or move.step == CLAIMED
        migration_id = move.migration_id
    if claimed:
        rt.placement.revert_move(uuid, migration_id, fence=fence)
    with rt.database.session() as session:
        evac_rows.update_move(session, evacuation_id, uuid, status=status, step=None)
        if claimed:
            session.execute(sa.update(Instance).where(Instance.id == uuid)
                            .values(task_state=None))


def _give_up(evacuation_id: str, uuid: str, fault: dict | None) -> None:
    """Record the server FAILED and apply the evacuation's on_error, in one transaction."""
    with runtime.get().database.session() as session:
        move = evac_rows.move(session, evacuation_id, uuid)
        fault = fault or move.fault or reservation_rows.fault(
            evac_rows.NO_VALID_HOST,
            f"no host left to move {uuid} to (tried: {', '.join(move.hosts_tried) or '-'})",
            step="schedule")
        evac_rows.update_move(session, evacuation_id, uuid, status=states.FAILED,
                              step=None, fault=fault)
        metrics.move_ended(states.FAILED)
        evacuation = evac_rows.get(session, evacuation_id, lock=True)
        stopping = evacuation.stopping
        if stopping is None and evacuation.on_error != states.ON_ERROR_CONTINUE:
            stopping = evacuation.on_error
            values = {"stopping": stopping}
            if evacuation.on_error == states.ON_ERROR_REVERT:
                values["status"] = states.REVERTING
            session.execute(sa.update(Evacuation).where(Evacuation.id == evacuation_id)
                            .values(**values))
    rows.stopped(runtime.get().database, evacuation_id, stopping)
    LOG.warning("evacuation %s: %s cannot be moved: %s", evacuation_id, uuid,
                fault["message"])
