"""Servers in groups: one task moves several servers of a lane, one after another.

A chain a server (a retry, then claim, move, attach and confirm tasks) costs
the engine five atoms a move: scheduling, checkpointing and validating each.
An evacuation of more than ``[conductor] instances_per_atom`` servers therefore
cuts each lane into tasks of at most that many servers, one
:class:`MoveServers` task each. Every member does what its chain does, with
the same steps (move.py) writing the same rows in the same order:

- its next host comes from :func:`retry.next_host`, asked as the retry asks it
  (the hosts of this run's failed tries; whether the last try found the
  server impossible to move), which also records a server that will not move;
- a failed try is undone as the chain's reverts undo it, latest step first:
  the volumes attached detached, the move undone on the destination, the
  source given back.

What the chain kept in the logbook (the retry's history, the step running), a
group reads from the move row, so a group run again after a crash or a
database outage resumes every member from it:

- DONE, FAILED, SKIPPED or REVERTED: finished in this run;
- a try under way (MOVING at a step) is taken up again at its destination: at
  the claim when the row says so (counted once), else at the move with the
  row's migration id (every step is idempotent by it, a start sent again
  included); one the fast path claimed (``claimed``) starts as its chain's
  retry would, which answers that host first unless the evacuation stops;
- this run's failed tries are the row's ``hosts_tried`` past the count the
  schedule saw when the run began (``move_placements["tried"]``), less a try
  under way.

Members run one after another: a lane is the evacuation's ``max_parallel``
throttle, and a group is a piece of one lane.

Revert: every member's unfinished try undone (volumes detached, move undone,
source given back); a DONE move stays.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import sqlalchemy as sa

from fleetflow.common import crash_points, states
from fleetflow.common.exceptions import FleetflowError, StaleFence
from fleetflow.flows import runtime
from fleetflow.flows.evacuate import move, retry
from fleetflow.flows.evacuate.fastpath import CLAIMED
from fleetflow.flows.evacuate.rows import volumes_for
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence.models import Move

LOG = logging.getLogger(__name__)

FINISHED = (states.DONE, states.FAILED, states.SKIPPED, states.REVERTED)


@dataclasses.dataclass(frozen=True)
class _Run:
    """What every member of one group's run shares."""

    evacuation_id: str
    instance_uuids: list
    move_placements: dict
    primary_moves_claimed: dict
    max_reschedules: int
    fence: Any


@dataclasses.dataclass(frozen=True)
class _Row:
    status: str
    step: str | None
    destination: str | None
    migration_id: str | None
    hosts_tried: list

    @property
    def under_way(self) -> str | None:
        """The destination of a try begun and neither finished nor undone."""
        if self.step == CLAIMED or (self.status == states.MOVING and self.step):
            return self.destination
        return None


def _rows(evacuation_id: str, uuids: list[str]) -> dict[str, _Row]:
    table = Move.__table__
    with runtime.get().database.read_session() as session:
        found = session.execute(sa.select(
            table.c.instance_id, table.c.status, table.c.step, table.c.destination,
            table.c.migration_id, table.c.hosts_tried).where(
                table.c.evacuation_id == evacuation_id, table.c.instance_id.in_(uuids)))
        return {r.instance_id: _Row(r.status, r.step, r.destination, r.migration_id,
                                    list(r.hosts_tried or [])) for r in found}


def _undo_try(run: _Run, index: int, reached_move: bool, volumes: list | None) -> None:
    """What the chain's reverts do after a failed try, latest step first."""
    args = (run.evacuation_id, run.instance_uuids, index)
    if volumes:
        move.detach(*args, volumes, run.fence)
    if reached_move:
        move.unmove(*args, run.fence)
    move.unclaim(*args, run.fence)


def move_member(run: _Run, name: str, index: int, row: _Row | None) -> str | None:
    """Move one server, trying its hosts in turn; the host it ends on, None when it
    did not move (recorded on its row: FAILED, SKIPPED, PENDING or REVERTED)."""
    if row is None:
        return None  # not a server of this evacuation any more
    if row.status in FINISHED:
        return row.destination if row.status == states.DONE else None
    uuid = run.instance_uuids[index]
    before = (run.move_placements.get("tried") or {}).get(str(index), 0)
    tried = [h for h in row.hosts_tried[before:] if h != row.under_way]
    # A try this member began goes on where it stopped; one the fast path
    # claimed first meets the stopping check like any try (its host comes first).
    host = row.destination if row.status == states.MOVING and row.step else None
    migration = row.migration_id if host and row.step != "claim" else None
    not_possible = False
    args = (run.evacuation_id, run.instance_uuids, index)
    while True:
        if host is None:
            host = retry.next_host(run.evacuation_id, uuid, index, tried, not_possible,
                                   run.move_placements, run.max_reschedules, run.fence)
            if host is None:
                return None
        reached_move, volumes = False, None
        try:
            if migration is None:
                migration = move.claim(*args, host, run.move_placements,
                                       run.primary_moves_claimed, run.fence)
                crash_points.maybe_crash(name, crash_points.MEMBER_CLAIMED)
            reached_move = True
            move.move(*args, host, migration, run.move_placements, run.fence)
            crash_points.maybe_crash(name, crash_points.MEMBER_MOVED)
            volumes = move.reattach(*args, host, run.move_placements, run.fence)
            move.confirm(*args, host, migration, run.move_placements, run.fence)
            return host
        except StaleFence:
            # This process no longer owns the flow: its new owner carries on
            # from the rows, which a stale try must not touch again.
            raise
        except FleetflowError as exc:
            LOG.info("evacuation %s: %s: try on %s failed: %s", run.evacuation_id, uuid,
                     host, exc)
            _undo_try(run, index, reached_move, volumes)
            crash_points.maybe_crash(name, crash_points.MEMBER_UNDONE)
            tried.append(host)
            not_possible = isinstance(exc, move.MoveNotPossible)
            host = migration = None


class MoveServers(FleetTask):
    """Move the servers ``indexes`` of the run, one after another.

    Provides nothing to other atoms (its result, ``{"hosts": {index: host or
    None}}``, is for the logbook). A server that cannot move never fails it.

    Revert: undoes every member's unfinished try (volumes detached from the
    destination, move undone there, source given back); DONE moves stay.
    """

    def __init__(self, name: str, indexes: list[int], max_reschedules: int):
        super().__init__(name=name)
        self.indexes = list(indexes)
        self.max_reschedules = max_reschedules

    def execute(self, evacuation_id: str, instance_uuids: list, move_placements: dict,
                primary_moves_claimed: dict, fence=None) -> dict:
        run = _Run(evacuation_id, instance_uuids, move_placements, primary_moves_claimed,
                   self.max_reschedules, fence)
        known = _rows(evacuation_id, [instance_uuids[i] for i in self.indexes])
        return {"hosts": {str(i): move_member(run, self.name, i, known.get(instance_uuids[i]))
                          for i in self.indexes}}

    def revert(self, result, evacuation_id: str, instance_uuids: list, fence=None,
               **kwargs) -> None:
        known = _rows(evacuation_id, [instance_uuids[i] for i in self.indexes])
        for index in reversed(self.indexes):
            row = known.get(instance_uuids[index])
            if row is None or row.under_way is None:
                continue
            args = (evacuation_id, instance_uuids, index)
            if row.step == "attach":
                with runtime.get().database.session() as session:
                    reachable, _lost = volumes_for(session, instance_uuids[index],
                                                   row.destination)
                move.detach(*args, reachable, fence)
            move.unmove(*args, fence)
            move.unclaim(*args, fence)
