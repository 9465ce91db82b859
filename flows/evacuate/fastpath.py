"""Every server's first destination claimed in one write: the evacuation's fast path.

Claiming server by server costs each one its own transactions; a thousand
servers off a rack spend most of their time there. As the provision flow's
``claim-primaries`` does for boots, this task claims every server's primary
destination at once: one placement write of every instance and migration
consumer, one statement for the instances and one for the move rows. The
per-server claim then finds its server claimed and does nothing; a server
that fails later is reverted by its own chain and retried on its alternates
as usual.

Left to the per-server claims: servers in a server group (their rule is
checked under the group's lock, one at a time) and servers that cannot move
now. When anything conflicts (capacity taken meanwhile, a concurrent writer,
a destination another evacuation took or that is no longer ``up``) nothing
is claimed here and every server takes the slow path.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.flows import keys, runtime
from fleetflow.flows.evacuate import gone
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.flows.tasks.claim import ClaimRace, refuse_closed_hosts
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence.fleet import stable_uuid
from fleetflow.persistence.models import Flavor, Instance, Move, utcnow
from fleetflow.persistence.placement.allocations import ConsumerWrite
from fleetflow.persistence.placement.errors import PlacementConflict

LOG = logging.getLogger(__name__)

MOVABLE = (states.ACTIVE, states.ERROR)


#: The step of a move whose destination the fast path claimed, not started yet:
#: the move stays PENDING (waiting for its lane) until its move task starts it.
CLAIMED = "claimed"


def _attempt(move: Move, host: str) -> tuple[int, bool]:
    """(this try's number, whether it is the same try again after a crash)."""
    rerun = (move.step, move.destination) == (CLAIMED, host)
    return move.attempts + (0 if rerun else 1), rerun


class ClaimPrimaryMoves(FleetTask):
    """Claim the primary destination of every server without a group, in one write.

    Provides ``{index: migration id}`` of the servers it claimed (indexes as
    strings), empty when anything conflicted.

    Revert: every claimed move not DONE gets its source back (idempotent;
    the servers' own claim reverts do the same).
    """

    default_provides = keys.PRIMARY_MOVES_CLAIMED

    def execute(self, move_placements: dict, evacuation_id: str, instance_uuids: list,
                fence=None) -> dict:
        rt = runtime.get()
        primaries = {i: c[0] for i, c in (move_placements.get("hosts") or {}).items() if c}
        if not primaries:
            return {}
        by_uuid = {instance_uuids[int(i)]: i for i in primaries}
        with rt.database.session() as session:
            moves = {m.instance_id: m for m in session.scalars(sa.select(Move).where(
                Move.evacuation_id == evacuation_id,
                Move.instance_id.in_(list(by_uuid))))}
            instances = session.execute(sa.select(
                Instance.id, Instance.status, Instance.task_state, Instance.group_id,
                Instance.tenant_id, Flavor).join(Flavor, Flavor.id == Instance.flavor_id)
                .where(Instance.id.in_(list(by_uuid)))).all()
        wanted = {}  # uuid -> (index, host, attempt, migration id, tenant, resources)
        for row in instances:
            move = moves.get(row.id)
            if (move is None or move.status == states.DONE or row.group_id
                    or row.status not in MOVABLE
                    or row.task_state not in (None, states.TASK_MIGRATING,
                                              states.TASK_REBUILDING)):
                continue
            index = by_uuid[row.id]
            attempt, _ = _attempt(move, primaries[index])
            resources = row.Flavor.resources
            wanted[row.id] = (index, primaries[index], attempt,
                              evac_rows.migration_id_for(evacuation_id, row.id, attempt),
                              row.tenant_id, resources)
        if not wanted:
            return {}
        try:
            self._claim(rt, wanted, fence)
        except PlacementConflict as exc:
            LOG.info("evacuation %s: fast path off: %s", evacuation_id, exc)
            return {}
        try:
            lost = self._record(rt, evacuation_id, wanted, moves)
        except ClaimRace as exc:
            LOG.info("evacuation %s: fast path off: %s", evacuation_id, exc)
            for uuid, (_i, _h, _a, migration, _t, _r) in wanted.items():
                rt.placement.revert_move(uuid, migration, fence=fence)
            return {}
        for uuid in lost:
            # A delete took the server between the read above and the record:
            # the claim goes back, and the retry skips the move.
            gone.give_back_claim(rt.placement, rt.database, uuid, wanted[uuid][3], fence)
        return {index: migration for uuid, (index, _h, _a, migration, _t, _r)
                in wanted.items() if uuid not in lost}

    @staticmethod
    def _claim(rt, wanted: dict, fence) -> None:
        """One write: every instance takes its destination, its migration the source."""
        consumers = [c for uuid, w in wanted.items() for c in (uuid, w[3])]

        def decide(known):
            writes = []
            for uuid, (_i, host, _a, migration, tenant, resources) in wanted.items():
                inst, mig = known[uuid], known[migration]
                destination = {stable_uuid(host): resources}
                if inst.allocations == destination:
                    continue  # claimed by an earlier run of this task
                writes.append(ConsumerWrite(migration, mig.allocations or inst.allocations,
                                            tenant, tenant, mig.generation, "MIGRATION"))
                writes.append(ConsumerWrite(uuid, destination, tenant, tenant,
                                            inst.generation, inst.consumer_type))
            return writes, None
        rt.placement.read_then_write(consumers, decide, fence)

    @staticmethod
    def _record(rt, evacuation_id: str, wanted: dict, moves: dict) -> set[str]:
        """Record the claims; the servers a delete took meanwhile (not recorded)."""
        now = utcnow()
        table = Move.__table__
        with rt.database.session() as session:
            refuse_closed_hosts(session, {w[1] for w in wanted.values()})
            for mode, task_state in ((states.MODE_REBUILD, states.TASK_REBUILDING),
                                     (None, states.TASK_MIGRATING)):
                uuids = [u for u in wanted if (moves[u].mode == states.MODE_REBUILD)
                         == (mode == states.MODE_REBUILD)]
                if uuids:
                    # Conditional, as every claim: a delete's mark wins over it.
                    session.execute(sa.update(Instance).where(
                        Instance.id.in_(uuids), Instance.status.in_(MOVABLE),
                        sa.or_(Instance.task_state.is_(None), Instance.task_state.in_(
                            (states.TASK_MIGRATING, states.TASK_REBUILDING))))
                        .values(task_state=task_state))
            # Read in the same transaction: the rows it changed are its own now.
            taken = set(session.scalars(sa.select(Instance.id).where(
                Instance.id.in_(list(wanted)), Instance.status.in_(MOVABLE),
                Instance.task_state.in_((states.TASK_MIGRATING, states.TASK_REBUILDING)))))
            lost = set(wanted) - taken
            if not taken:
                return lost
            session.connection().execute(
                table.update().where(table.c.evacuation_id == evacuation_id,
                                     table.c.instance_id == sa.bindparam("b_uuid"))
                .values(status=states.PENDING, step=CLAIMED,
                        destination=sa.bindparam("b_host"),
                        attempts=sa.bindparam("b_attempt"),
                        migration_id=sa.bindparam("b_migration"),
                        hosts_tried=sa.bindparam("b_tried", type_=table.c.hosts_tried.type),
                        updated_at=now),
                [{"b_uuid": uuid, "b_host": host, "b_attempt": attempt,
                  "b_migration": migration,
                  "b_tried": list(moves[uuid].hosts_tried or [])
                  + ([] if _attempt(moves[uuid], host)[1] else [host])}
                 for uuid, (_i, host, attempt, migration, _t, _r) in wanted.items()
                 if uuid in taken])
        return lost

    def revert(self, result, move_placements: dict, evacuation_id: str, instance_uuids: list,
               fence=None, **kwargs) -> None:
        rt = runtime.get()
        # Whatever the result says: a crash may have come after the write.
        uuids = [instance_uuids[int(i)] for i in (move_placements or {}).get("hosts", {})]
        with rt.database.session() as session:
            moves = [m for m in session.scalars(sa.select(Move).where(
                Move.evacuation_id == evacuation_id, Move.instance_id.in_(uuids)))
                if m.status != states.DONE]
        for move in moves:
            if rt.placement.revert_move(move.instance_id, move.migration_id, fence=fence):
                with rt.database.session() as session:
                    session.execute(sa.update(Instance).where(Instance.id == move.instance_id)
                                    .values(task_state=None))
