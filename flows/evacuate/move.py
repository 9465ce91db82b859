"""One server's move off an evacuated host, as four steps: claim, move, re-attach, confirm.

Each step has its undo. The per-server chain runs each step as its own task
(``chain.py``); a group of servers runs them in turn inside one task
(``batch.py``): the same writes, in the same order.

Every step finds the server by the run's ``instance_uuids[index]`` and its
move row by (evacuation, instance). The move's ``migration_id`` keys
everything it does: the placement migration consumer and the record on the
destination host, so a step run again after a crash asks what already
happened instead of doing it again. A finished move is never undone: every
undo here does nothing once the move row is DONE (an evacuation reverts its
unfinished moves only).

An undo takes the destination from the move row (written with the claim),
never the chain's ``host``: that is the retry's, which a REVERTED retry no
longer has (docs/adding-a-flow.md).
"""

from __future__ import annotations

import logging
import time

import sqlalchemy as sa

from fleetflow.common import config, metrics, states
from fleetflow.common.exceptions import Conflict, FleetflowError, StaleFence
from fleetflow.compute.exceptions import HostDead, InstanceNotFound, OutcomeUnknown
from fleetflow.flows import runtime
from fleetflow.flows.evacuate import rows, writes
from fleetflow.flows.evacuate.fastpath import CLAIMED
from fleetflow.flows.tasks.claim import ClaimRace, join_group
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import groups
from fleetflow.persistence.fleet import stable_uuid
from fleetflow.persistence.models import Flavor, Instance, Volume
from fleetflow.persistence.placement.errors import PlacementConflict

LOG = logging.getLogger(__name__)

TASK_STATE = {states.MODE_REBUILD: states.TASK_REBUILDING}
# Attempts at an RPC whose answer was lost, each preceded by asking the host.
RPC_ATTEMPTS = 3


class MoveNotPossible(Conflict):
    """The server cannot be moved at all now (deleted, busy): no other host helps."""

    code = "MOVE_NOT_POSSIBLE"


class MoveCancelled(FleetflowError):
    """The evacuation is reverting: this unfinished move is undone."""

    code = "MOVE_CANCELLED"


def _finished(session, evacuation_id: str, uuid: str) -> bool:
    return evac_rows.move(session, evacuation_id, uuid).status == states.DONE


def _to_undo(evacuation_id: str, instance_uuids: list, index: int) -> tuple | None:
    """(uuid, source, destination, migration id, group ids) of the move a revert
    must undo; None when no destination was claimed (the chain had no host: the
    server was given up, skipped or left) or the move is DONE: a finished move
    is never undone."""
    uuid = instance_uuids[index]
    with runtime.get().database.session() as session:
        move = evac_rows.move(session, evacuation_id, uuid)
        if move.status != states.MOVING and move.step != CLAIMED:
            return None
        instance = session.get(Instance, uuid)
        if instance is None or instance.status in (states.DELETING, states.DELETED):
            # Its claim refused a server a delete took: nothing of the move
            # exists, and rejoining groups or clearing task_state would undo
            # the delete's own writes (the retry skips the move).
            return None
        return (uuid, move.source, move.destination, move.migration_id,
                groups.groups_of(session, uuid, instance.group_id))


def _fail_step(evacuation_id: str, uuid: str, step: str, host: str | None,
               exc: Exception) -> None:
    """Write the failure on the move row (the API and the retry read it), then raise."""
    with runtime.get().database.session() as session:
        evac_rows.update_move(session, evacuation_id, uuid,
                              fault=rows.fault_of(exc, step, host))


def claim(evacuation_id: str, instance_uuids: list, index: int, host: str,
          move_placements: dict, primary_moves_claimed: dict, fence=None) -> str:
    """Claim ``host``: group rule re-checked under its lock, then one POST
    /allocations (the instance takes the destination, the migration consumer
    keeps the source). Returns the try's migration id, what the next steps key on.

    Undo (:func:`unclaim`): the instance gets the source back from the
    migration consumer, its membership returns to the source, the instance is
    idle again.
    """
    if (str(index) in primary_moves_claimed
            and host == move_placements["hosts"][str(index)][0]):
        # Claimed, with its try recorded, by claim-primaries.
        return primary_moves_claimed[str(index)]
    rt = runtime.get()
    uuid = instance_uuids[index]
    refusal = None
    with rt.database.session() as session:
        move = evac_rows.move(session, evacuation_id, uuid)
        if move.status == states.DONE:
            return move.migration_id
        # In the transaction that writes the destination, which another
        # evacuation of that host counts (docs/evacuation.md,
        # "Overlapping operations").
        closed = evac_rows.closed_to_builds(session, [host])
        busy = 0 if closed else session.execute(sa.update(Instance).where(
            Instance.id == uuid, Instance.status.in_((states.ACTIVE, states.ERROR)),
            sa.or_(Instance.task_state.is_(None),
                   Instance.task_state.in_((states.TASK_MIGRATING,
                                            states.TASK_REBUILDING))))
            .values(task_state=TASK_STATE.get(move.mode, states.TASK_MIGRATING))).rowcount
        instance = session.get(Instance, uuid)
        if busy:
            # The same try again after a crash counts once.
            rerun = (move.status, move.step, move.destination) == (
                states.MOVING, "claim", host)
            attempt = move.attempts + (0 if rerun else 1)
            migration_id = evac_rows.migration_id_for(evacuation_id, uuid, attempt)
            evac_rows.update_move(session, evacuation_id, uuid, status=states.MOVING,
                                  step="claim", destination=host, attempts=attempt,
                                  migration_id=migration_id,
                                  hosts_tried=list(move.hosts_tried or [])
                                  + ([] if rerun else [host]))
            resources = session.get(Flavor, instance.flavor_id).resources
            group_ids = groups.groups_of(session, uuid, instance.group_id)
            tenant = instance.tenant_id
        elif closed and instance is not None and instance.status in (states.ACTIVE,
                                                                     states.ERROR):
            # A server that cannot move anyway says so rather than trying
            # its next host.
            refusal = ClaimRace(f"{host} is {closed[host]}: it takes no new server",
                                host=host)
        else:
            doing = f" ({instance.task_state})" if instance and instance.task_state else ""
            refusal = MoveNotPossible(
                f"server {uuid} is {instance.status if instance else 'gone'}{doing}: it "
                "cannot be moved", instance_id=uuid)
    if refusal is not None:
        _fail_step(evacuation_id, uuid, "claim", host, refusal)
        raise refusal
    try:
        if group_ids:
            with rt.database.session() as session:
                # Lock first: which members have landed must be read under
                # the lock that the check and the join hold.
                for group_id in group_ids:
                    groups.lock(session, group_id)
                for group_id in group_ids:
                    join_group(session, group_id, uuid, host,
                               also_exclude=rows.unlanded_members(
                                   session, evacuation_id, group_id))
        rt.placement.move(uuid, migration_id, {stable_uuid(host): resources},
                          project_id=tenant, user_id=tenant, fence=fence)
    except (ClaimRace, PlacementConflict) as exc:
        _fail_step(evacuation_id, uuid, "claim", host, exc)
        raise
    return migration_id


def unclaim(evacuation_id: str, instance_uuids: list, index: int, fence=None) -> None:
    """Undo :func:`claim`: the source back, whatever was written before a crash."""
    undo = _to_undo(evacuation_id, instance_uuids, index)
    if undo is None:
        return
    rt = runtime.get()
    uuid, source, _destination, migration_id, group_ids = undo
    rt.placement.revert_move(uuid, migration_id, fence=fence)
    with rt.database.session() as session:
        for group_id in group_ids:
            groups.join(session, group_id, uuid, source)
        session.execute(sa.update(Instance).where(Instance.id == uuid)
                        .values(task_state=None))
        evac_rows.update_move(session, evacuation_id, uuid, step=None)


def move(evacuation_id: str, instance_uuids: list, index: int, host: str,
         migration: str, move_placements: dict, fence=None) -> dict:
    """Start the move on the destination, then poll it until it ends.

    A long move holds no RPC call: the destination keeps the move's record
    (keyed by the migration id) and the step asks it every
    ``[compute] move_poll_interval`` (``[openstack] poll_interval`` on Nova). Drain
    with ``fallback: cold`` turns a server that cannot live-migrate into a cold move
    to the same host.

    Undo (:func:`unmove`): the destination undoes the move (its copy goes; a
    cold source is started again); nothing when it never started.
    """
    rt = runtime.get()
    uuid = instance_uuids[index]
    # What the server is, from the schedule (the store): no rows to read.
    server = move_placements["servers"][str(index)]
    spec = {"kind": server["mode"], "uuid": uuid, "source_host": server["source"],
            "resources": server["resources"], "image": server["image"]}
    fallback = bool(move_placements.get("fallback_cold"))
    writes.write_move(rt.database, evacuation_id, uuid,
                      {"status": states.MOVING, "step": "move"})
    try:
        record = _start(rt, host, migration, spec, fence, fallback, evacuation_id)
        record = _wait(rt, host, migration, record, evacuation_id)
    except StaleFence:
        raise  # this process lost the flow: nothing to record of the host
    except FleetflowError as exc:
        _fail_step(evacuation_id, uuid, "move", host, exc)
        raise
    return {"host": host, "kind": record["kind"], "status": record["status"]}


def _start(rt, host, migration_id, spec, fence, fallback, evacuation_id) -> dict:
    from fleetflow.compute.exceptions import LiveMigrationUnsupported

    try:
        return _start_move(rt, host, migration_id, spec, fence)
    except LiveMigrationUnsupported:
        if not (fallback and spec["kind"] == states.MODE_LIVE):
            raise
    LOG.info("%s cannot live-migrate: falling back to a cold move", spec["uuid"])
    spec = dict(spec, kind=states.MODE_COLD)
    with rt.database.session() as session:
        evac_rows.update_move(session, evacuation_id, spec["uuid"], mode=states.MODE_COLD)
    return _start_move(rt, host, migration_id, spec, fence)


def _wait(rt, host, migration_id, record, evacuation_id) -> dict:
    from fleetflow.compute.exceptions import MoveFailed

    interval = config.move_poll_interval(rt.conf)
    while record["status"] in ("queued", "running"):
        if rows.stopping(rt.database, evacuation_id) == states.ON_ERROR_REVERT:
            raise MoveCancelled(f"evacuation {evacuation_id} is reverting: move of "
                                f"{record['uuid']} cancelled")
        time.sleep(interval)
        record = _ask(rt, host, migration_id) or record
    if record["status"] not in ("completed", "confirmed"):
        raise MoveFailed(record.get("error") or f"move {migration_id} {record['status']}",
                         host=host, migration_id=migration_id)
    return record


def unmove(evacuation_id: str, instance_uuids: list, index: int, fence=None) -> None:
    """Undo :func:`move` on the destination the move row names."""
    undo = _to_undo(evacuation_id, instance_uuids, index)
    if undo is None:
        return
    rt = runtime.get()
    uuid, _source, host, migration_id, _group_ids = undo
    try:
        rt.compute.revert_move(host, migration_id, fence=fence)
    except (HostDead, OutcomeUnknown) as exc:
        # A destination that died failed its moves as it died, leaving
        # nothing there; one that cannot be reached now will not get the
        # move confirmed. Raising would strand the whole evacuation
        # (a revert that fails stops the flow): record it and go on.
        LOG.warning("%s: could not undo its move on %s: %s", uuid, host, exc)
        with rt.database.session() as session:
            evac_rows.update_move(session, evacuation_id, uuid,
                                  fault=rows.fault_of(exc, "move", host))


def _ask(rt, host: str, migration_id: str) -> dict | None:
    try:
        return rt.compute.get_move(host, migration_id)
    except OutcomeUnknown:
        return None


def _start_move(rt, host: str, migration_id: str, spec: dict, fence) -> dict:
    """Start (idempotent by migration id); after a lost answer, ask the host first."""
    last = None
    for attempt in range(RPC_ATTEMPTS):
        if attempt:
            record = _ask(rt, host, migration_id)
            if record is not None:
                return record
        try:
            return rt.compute.start_move(host, migration_id, spec["kind"], spec["uuid"],
                                         spec["source_host"], spec["resources"],
                                         image=spec["image"], fence=fence)
        except OutcomeUnknown as exc:
            last = exc
    raise last


def reattach(evacuation_id: str, instance_uuids: list, index: int, host: str,
             move_placements: dict, fence=None) -> list:
    """Attach on the destination every volume of the server it can still reach;
    the volumes attached.

    A volume on the dead source's own disk cannot come along: it is left out
    here and recorded as lost when the move is confirmed.

    Undo (:func:`detach`): detaches them from the destination's copy (idempotent).
    """
    if not move_placements["servers"][str(index)]["volumes"]:
        return []
    rt = runtime.get()
    uuid = instance_uuids[index]
    with rt.database.session() as session:
        if _finished(session, evacuation_id, uuid):
            return []
        reachable, _lost = rows.volumes_for(session, uuid, host)
        if reachable:
            evac_rows.update_move(session, evacuation_id, uuid, step="attach")
    try:
        for volume_id in reachable:
            rt.compute.attach_volume(host, uuid, volume_id, fence=fence)
    except StaleFence:
        raise  # this process lost the flow: nothing to record of the host
    except FleetflowError as exc:
        _fail_step(evacuation_id, uuid, "attach", host, exc)
        raise
    return reachable


def detach(evacuation_id: str, instance_uuids: list, index: int, volumes: list,
           fence=None) -> None:
    """Undo :func:`reattach` for ``volumes``, unless the move is DONE."""
    if not volumes:
        return
    rt = runtime.get()
    uuid = instance_uuids[index]
    with rt.database.session() as session:
        move = evac_rows.move(session, evacuation_id, uuid)
        if move.status == states.DONE:
            return
        host = move.destination
    for volume_id in volumes:
        try:
            rt.compute.detach_volume(host, uuid, volume_id, fence=fence)
        except (InstanceNotFound, FleetflowError) as exc:
            LOG.warning("detach %s from %s on %s: %s", volume_id, uuid, host, exc)


def confirm(evacuation_id: str, instance_uuids: list, index: int, host: str,
            migration: str, move_placements: dict, fence=None) -> dict:
    """End the move: the destination confirms, the migration consumer's source
    allocation goes, and the instance row moves (one transaction, move DONE).

    The two writes go with other moves' ending at the same time (group
    commit: writes.py), each committed before this step returns. A confirmed
    move is finished and stays: it has no undo.
    """
    rt = runtime.get()
    uuid = instance_uuids[index]
    server = move_placements["servers"][str(index)]
    try:
        rt.compute.confirm_move(host, migration, fence=fence)
        writes.release_migration(rt.placement, migration, fence=fence)
    except StaleFence:
        raise  # this process lost the flow: nothing to record of the host
    except FleetflowError as exc:
        _fail_step(evacuation_id, uuid, "confirm", host, exc)
        raise
    lost = []
    if server["volumes"]:
        with rt.database.session() as session:
            _reachable, lost = rows.volumes_for(session, uuid, host)
            for volume in session.scalars(sa.select(Volume).where(Volume.id.in_(lost))):
                # Its data was on the dead source's own disk.
                volume.status, volume.instance_id = states.VOLUME_ERROR, None
    writes.write_move(
        rt.database, evacuation_id, uuid,
        {"status": states.DONE, "step": None, "fault": None, "destination": host,
         "volumes_lost": lost},
        {"host": host, "task_state": None})
    metrics.move_ended(states.DONE)
    LOG.info("evacuation %s: %s moved %s -> %s", evacuation_id, uuid, server["source"],
             host)
    return {"host": host, "volumes_lost": lost}
