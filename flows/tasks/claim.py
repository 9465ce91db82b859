"""Claims: placement allocations and group membership, written before any boot.

An instance's allocation is keyed by its uuid (the placement consumer), so a
claim repeated after a crash finds its own allocation and does nothing more.
The group rule is checked again here, under the group's row lock, against
the members *now*: the scheduler's view may be stale by the time we claim
(two reservations scheduled at the same moment into one anti-affinity group).
So is the host itself: one that an evacuation took, or that is no longer
``up``, since the schedule loses the claim like a full one
(:func:`refuse_closed_hosts`).
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.exceptions import Conflict
from fleetflow.flows import keys, runtime
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import groups
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Host, Instance
from fleetflow.persistence.placement.errors import PlacementConflict
from fleetflow.scheduler.policies import GroupRule
from fleetflow.scheduler.result import NoValidHost
from fleetflow.scheduler.snapshot import CloudSnapshot, HostState
from fleetflow.scheduler.spec import GroupSpec

LOG = logging.getLogger(__name__)


class ClaimRace(Conflict):
    """The chosen host no longer fits: capacity or a group rule was taken meanwhile."""

    code = "CLAIM_CONFLICT"


def _host_states(session, names) -> dict[str, HostState]:
    result = {}
    for row in session.scalars(sa.select(Host).where(Host.name.in_(set(names)))):
        result[row.name] = HostState(name=row.name, uuid=row.uuid, region=row.region,
                                     zone=row.zone, rack=row.rack)
    return result


def join_group(session, group_id: str, instance_uuid: str, host: str,
               also_exclude=()) -> None:
    """Check the group rule for ``host`` against the current members, then join.

    Must run in a transaction that holds the group lock (``groups.lock``).
    Raises ClaimRace when another member took the place meanwhile.
    ``also_exclude``: members whose recorded host is about to change (an
    evacuation's servers not moved yet), left out of the check.
    """
    group = groups.lock(session, group_id)
    spec = GroupSpec.from_row(group, exclude_instances=[instance_uuid, *also_exclude])
    known = _host_states(session, [*spec.member_hosts, host])
    candidate = known.get(host) or HostState(name=host)
    rule = GroupRule(spec, CloudSnapshot(known.values() if host in known
                                         else [*known.values(), candidate]))
    allowed, steps = rule.filter([candidate])
    if not allowed:
        why = "; ".join(str(s) for s in steps if s.after < s.before)
        raise ClaimRace(f"group {group_id}: {host} would break the rule ({why})",
                        host=host, group_id=group_id)
    groups.join(session, group_id, instance_uuid, host)


def refuse_closed_hosts(session, hosts) -> None:
    """ClaimRace when a host of ``hosts`` takes no new server: held by an
    evacuation, or not ``up``.

    Call it in the transaction that records the instances on their hosts,
    after their allocations are written. An evacuation holds its hosts and
    then counts the servers still building there in one transaction; this
    reads the same host rows (locked on PostgreSQL), so whichever commits
    second sees the other: the evacuation is refused, or the claim is lost
    (docs/evacuation.md, "Overlapping operations").
    """
    closed = evac_rows.closed_to_builds(session, hosts)
    if closed:
        name = min(closed)
        raise ClaimRace(f"{name} is {closed[name]}: it takes no new server", host=name)


def allocation_for(request_spec: dict, rp_uuid: str) -> dict:
    return {rp_uuid: dict(request_spec["resources"])}


def release(instance_uuid: str, host: str | None, group_id: str | None, fence) -> None:
    """Drop the instance's allocation (on ``host`` only, when given) and its membership."""
    rt = runtime.get()
    rt.placement.release(instance_uuid, providers=[_provider_of(host)] if host else None,
                         fence=fence)
    if group_id:
        with rt.database.session() as session:
            groups.leave(session, instance_uuid, group_id, host=host)


def _provider_of(host: str) -> str:
    from fleetflow.persistence.fleet import stable_uuid

    # Hosts register as providers under the uuid of their row, which the fleet
    # loader derives from the name; reading the row would cost a query per claim.
    return stable_uuid(host)


def claim_on(instance_uuid: str, host: str, placements: dict, request_spec: dict,
             tenant_id: str, fence=None, exactly: bool = False) -> None:
    """Claim one instance's resources on ``host``, join its group, record the try.

    ClaimRace when the host no longer fits, breaks the group rule or is
    closed to builds; nothing of the try is left held then. ``exactly``:
    the instance holds this allocation and no other afterwards (a try that
    a crash cut off between its claim and its record may have left one on
    another host; see flows/provision/batch.py).
    """
    rt = runtime.get()
    group_id = (request_spec.get("group") or {}).get("id")
    if group_id:
        with rt.database.session() as session:
            join_group(session, group_id, instance_uuid, host)
    rp_uuid = placements["host_uuids"].get(host) or _provider_of(host)
    wanted = allocation_for(request_spec, rp_uuid)
    try:
        if exactly:
            rt.placement.claim_exactly(instance_uuid, wanted, project_id=tenant_id,
                                       user_id=tenant_id, fence=fence)
        else:
            rt.placement.claim(instance_uuid, wanted, project_id=tenant_id,
                               user_id=tenant_id, fence=fence)
    except PlacementConflict as exc:
        if group_id:
            with rt.database.session() as session:
                groups.leave(session, instance_uuid, group_id, host=host)
        raise ClaimRace(f"{host}: {exc}", host=host) from exc
    try:
        with rt.database.session() as session:
            refuse_closed_hosts(session, [host])
            # NOTE: recorded once the claim holds, so a claim lost to another
            # reservation leaves no host nor attempt the instance never
            # reached. The boot follows at once: say "spawning" now rather
            # than pay a second write for a claim that takes milliseconds.
            rows.record_attempt(session, instance_uuid, host, status=states.BUILDING,
                                task_state=states.TASK_SPAWNING)
    except ClaimRace:
        release(instance_uuid, host, group_id, fence)
        raise


def record_gave_up(instance_uuid: str) -> None:
    """ERROR on no host: its candidates ran out (best-effort).

    Every try was undone, so it is on no host; hosts_tried keeps the hosts it
    was built on, for the operator, and an earlier fault stays the one shown.
    """
    rt = runtime.get()
    with rt.database.session() as session:
        current = session.get(Instance, instance_uuid)
        fault = None
        if current is not None and current.fault is None:
            fault = rows.fault(NoValidHost.code, "no host left to try", step="claim")
        rows.update_instance(session, instance_uuid, status=states.ERROR,
                             task_state=None, host=None, **({"fault": fault} if fault else {}))


class ClaimPrimaries(FleetTask):
    """All-or-nothing fast path: every primary claimed in one multi-consumer write.

    Provides the indexes it claimed (all, or none when anything conflicted —
    the per-instance claims then do the work one by one, with reschedules).

    Revert: releases the allocations and memberships of every instance it claimed.
    """

    default_provides = keys.PRIMARIES_CLAIMED

    def execute(self, placements: dict, request_spec: dict, instance_uuids: list,
                tenant_id: str, fence=None) -> list:
        rt = runtime.get()
        hosts = placements["hosts"]
        group_id = (request_spec.get("group") or {}).get("id")
        wanted = {instance_uuids[int(i)]: hosts[i][0] for i in hosts}
        if group_id:
            try:
                with rt.database.session() as session:
                    for uuid, host in wanted.items():
                        join_group(session, group_id, uuid, host)
            except ClaimRace as exc:
                LOG.info("fast path off for this reservation: %s", exc)
                return []
        allocations = {uuid: allocation_for(request_spec, placements["host_uuids"][host])
                       for uuid, host in wanted.items()}
        try:
            rt.placement.claim_many(allocations, project_id=tenant_id, user_id=tenant_id,
                                    fence=fence)
        except PlacementConflict as exc:
            LOG.info("fast path off for this reservation: %s", exc)
            if group_id:
                with rt.database.session() as session:
                    for uuid in wanted:
                        groups.leave(session, uuid, group_id)
            return []
        try:
            with rt.database.session() as session:
                refuse_closed_hosts(session, wanted.values())
                # Every claimed instance's first attempt in one statement,
                # instead of one write per instance in its claim task.
                rows.record_first_attempts(session, wanted, status=states.BUILDING,
                                           task_state=states.TASK_SPAWNING)
        except ClaimRace as exc:
            LOG.info("fast path off for this reservation: %s", exc)
            for uuid, host in wanted.items():
                release(uuid, host, group_id, fence)
            return []
        return sorted(hosts, key=int)

    def revert(self, result, placements: dict, request_spec: dict, instance_uuids: list,
               tenant_id: str, fence=None, **kwargs) -> None:
        group_id = (request_spec.get("group") or {}).get("id")
        # Whatever the result says, undo what the world shows: a crash may
        # have come after the write but before the result was saved.
        for index, candidates in (placements or {}).get("hosts", {}).items():
            release(instance_uuids[int(index)], candidates[0], group_id, fence)


class ClaimResources(FleetTask):
    """Claim one instance's resources on the host its retry chose, and join its group.

    ``host`` None means its candidates ran out under best-effort: the
    instance is marked ERROR with its last fault and nothing is claimed.

    Revert: releases the instance's allocation and membership wherever they
    are: a chain holds one host at a time, each earlier try having been undone
    by its own revert. It trusts neither the result, which after a crash in
    the middle of a later try may still be the earlier try's (TaskFlow's stock
    engine keeps it; docs/engine.md), nor the retry's ``host``, which a
    REVERTED retry no longer has.
    """

    def execute(self, instance_uuids: list, index: int, host: str | None, placements: dict,
                primaries_claimed: list, request_spec: dict, tenant_id: str,
                fence=None) -> dict | None:
        instance_uuid = instance_uuids[index]
        if host is None:
            record_gave_up(instance_uuid)
            return None
        primary = placements["hosts"].get(str(index), [None])[0]
        if host == primary and str(index) in primaries_claimed:
            # Claimed, and its attempt recorded, by claim-primaries.
            return {"host": host, "fast_path": True}
        claim_on(instance_uuid, host, placements, request_spec, tenant_id, fence)
        return {"host": host, "fast_path": False}

    def revert(self, instance_uuids: list, index: int, request_spec: dict,
               fence=None, **kwargs) -> None:
        group_id = (request_spec.get("group") or {}).get("id")
        release(instance_uuids[index], None, group_id, fence)
