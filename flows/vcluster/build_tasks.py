"""A virtual cluster's build: lifecycle, joint schedule, one claim for all, finish.

The placement the schedule task provides (``keys.VCLUSTER_PLACEMENT``) is the
scheduler's answer (``VClusterPlacement.to_dict()``) for the run's new
members plus what the tasks after it need, so none of them reads it again::

    {"hosts": {name: [host, alternates...]}, "backends": {name: [...]},
     "attachments": {volume name: server name}, "domains": {...},
     "ids": {member name: resource id}, "host_uuids": {host: rp uuid},
     "backend_uuids": {backend: rp uuid}, "new": [new member names]}

A run is all-or-nothing: the create's revert leaves the cluster REVERTED with
nothing held; an update's revert leaves the cluster as it was before, ACTIVE,
with the update's fault.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from taskflow import retry

from fleetflow.common import states
from fleetflow.common.exceptions import FleetflowError
from fleetflow.flows import keys, runtime
from fleetflow.flows.tasks.base import FleetRetry, FleetTask
from fleetflow.flows.tasks.claim import ClaimRace, refuse_closed_hosts
from fleetflow.flows.vcluster import storage_routes
from fleetflow.persistence import groups
from fleetflow.persistence import reservations as rows
from fleetflow.persistence import vclusters as vc_rows
from fleetflow.persistence.models import Instance, Volume
from fleetflow.persistence.placement.errors import PlacementConflict
from fleetflow.scheduler.vcluster import plan as vcluster_plan

LOG = logging.getLogger(__name__)

SCHEDULE_ATTEMPTS = 3


class VClusterNoValidHost(FleetflowError):
    """The joint pass could not place every member; the message names what stopped it."""

    code = "NO_VALID_HOST"
    status = 409


def first_fault(session, vcluster_id: str, resource_ids: list[str]) -> dict | None:
    """The latest fault written on one of the run's members, if any."""
    found = []
    for model in (Instance, Volume):
        stored = sa.func.coalesce(sa.cast(model.fault, sa.Text), "null")
        row = session.execute(sa.select(model.fault, model.updated_at).where(
            model.id.in_(resource_ids), stored != "null")
            .order_by(model.updated_at.desc()).limit(1)).first()
        if row is not None:
            found.append(row)
    return max(found, key=lambda r: r[1])[0] if found else None


class VClusterLifecycle(FleetTask):
    """Says what the run is doing; on revert, writes how it ended.

    Revert: a create's members REVERTED (volumes DELETED), its server groups
    gone and the cluster REVERTED with the fault; an update's new members
    forgotten, its groupings restored and the cluster ACTIVE with the fault.
    """

    def execute(self, vcluster_id: str, vcluster_run: str) -> None:
        rt = runtime.get()
        status = states.SCHEDULING if vcluster_run == states.RUN_CREATE else states.UPDATING
        with rt.database.session() as session:
            vc_rows.set_status(session, vcluster_id, status)

    def revert(self, vcluster_id: str, vcluster_run: str, flow_id: str, servers: list,
               volumes: list, flow_failures=None, **kwargs) -> None:
        rt = runtime.get()
        with rt.database.session() as session:
            vcluster = vc_rows.get(session, vcluster_id)
            server_rows, volume_rows = vc_rows.members_of(session, vcluster_id, servers, volumes)
            resource_ids = [m.resource_id for m in [*server_rows, *volume_rows]]
            fault = first_fault(session, vcluster_id, resource_ids)
            if flow_failures:
                failure = next(iter(flow_failures.values()))
                code = getattr(failure.exception, "code", None) or "FLOW_FAILED"
                if fault is None or code == VClusterNoValidHost.code:
                    fault = rows.fault(code, failure.exception_str)
            rows.update_instances(session, [m.resource_id for m in server_rows],
                                  status=states.REVERTED, task_state=None)
            session.execute(sa.update(Volume).where(
                Volume.id.in_([m.resource_id for m in volume_rows]))
                .values(status=states.VOLUME_DELETED, instance_id=None))
            if vcluster_run == states.RUN_CREATE:
                vc_rows.delete_owned_groups(session, vcluster_id)
                vc_rows.set_status(session, vcluster_id, states.REVERTED, fault=fault)
                return
            before = vc_rows.run_of(vcluster, flow_id).get("groupings_before", [])
            vc_rows.drop_members(session, vcluster_id, [m.name for m in
                                                        [*server_rows, *volume_rows]])
            names = {m.name for m in vc_rows.members(session, vcluster_id)
                     if m.kind == states.MEMBER_SERVER}
            vc_rows.set_groupings(session, vcluster, before, names)
            vc_rows.sync_group_ids(session, vcluster_id)
            vc_rows.set_status(session, vcluster_id, states.ACTIVE, fault=fault)


class ScheduleVCluster(FleetTask):
    """Place the run's new members jointly with the cluster's others (pinned).

    Raises VClusterNoValidHost with the scheduler's explanation when they
    do not fit. Revert: nothing (it claims nothing).
    """

    default_provides = keys.VCLUSTER_PLACEMENT

    def execute(self, vcluster_id: str, vcluster_run: str, servers: list,
                volumes: list) -> dict:
        rt = runtime.get()
        adding = None if vcluster_run == states.RUN_CREATE else {
            states.MEMBER_SERVER: servers, states.MEMBER_VOLUME: volumes}
        usage = rt.placement.usages_by_provider()
        runs = {states.MEMBER_SERVER: set(servers), states.MEMBER_VOLUME: set(volumes)}
        with rt.database.session() as session:
            members = vc_rows.members(session, vcluster_id)
            cluster = vcluster_plan.cluster_input(session, vcluster_id, adding, members)
            placement = vcluster_plan.place(session, cluster, usage, rt.conf)
            if not placement.fits:
                raise VClusterNoValidHost(f"vcluster {vcluster_id}: {placement.explanation}",
                                          explanation=placement.explanation)
            answer = placement.to_dict()
            answer["ids"] = {m.name: m.resource_id for m in members}
            # Servers first, then volumes, each by index (the order members are read in).
            answer["new"] = [m.name for m in members if m.index in runs.get(m.kind, ())]
            answer["host_uuids"], answer["backend_uuids"] = vcluster_plan.provider_uuids(
                session, placement)
            # Where each candidate backend's calls go (a create re-checks on failure).
            answer["routes"] = storage_routes.first_routes(session, answer["backend_uuids"],
                                                           rt.conf)
        return answer


class ScheduleRetry(FleetRetry):
    """Schedules again (from a fresh view) when the one claim lost a race; at most
    SCHEDULE_ATTEMPTS passes. Any other failure reverts the run.

    Revert: nothing.
    """

    def execute(self, history) -> int:
        return len(history) + 1

    def on_failure(self, history, **kwargs) -> str:
        last = len(history) - 1
        if history.caused_by(ClaimRace, index=last) and len(history) < SCHEDULE_ATTEMPTS:
            return retry.RETRY
        return retry.REVERT_ALL

    def revert(self, history, *args, **kwargs) -> None:
        return None


def server_groups_joined(session, vcluster_id: str, placement: dict) -> None:
    """Every server of the cluster a member, on its host, of each group it is in,
    and each server's ``group_id`` hint its first group.

    Under the groups' row locks (all taken in one statement, in id order),
    each group's rule is checked once for all its members where they are now
    (an evacuation may have moved one since the schedule): ClaimRace when it
    no longer holds.
    """
    group_ids, ids = vc_rows.server_groups_of(session, vcluster_id), placement["ids"]
    by_group: dict[str, dict[str, str]] = {}
    for name, candidates in placement["hosts"].items():
        for group_id in group_ids.get(name, ()):
            by_group.setdefault(group_id, {})[ids[name]] = candidates[0]
    if by_group:
        _join_checked(session, by_group)
    vc_rows.sync_group_ids(session, vcluster_id, group_ids)


def _join_checked(session, by_group: dict[str, dict[str, str]]) -> None:
    """Join ``{group_id: {instance_id: host}}`` once each group's rule is checked."""
    locked = groups.lock_many(session, sorted(by_group))
    placed = groups.members_placed(session, sorted(by_group))
    for group_id, wanted in by_group.items():
        placed[group_id].update(wanted)
    places = vcluster_plan.host_places(
        session, {h for hosts in placed.values() for h in hosts.values()})
    for group_id in sorted(by_group):
        _check_group_rule(locked[group_id], placed[group_id], places)
    groups.join_all(session, by_group)


def _check_group_rule(group, hosts: dict[str, str], places: dict) -> None:
    """ClaimRace unless ``hosts`` (member -> host) keep the group's rule at its scope."""
    scope = group.scope or "host"
    domains = [places[h].domain(scope) if h in places else h for h in hosts.values()]
    policy = (group.policies or ["anti-affinity"])[0]
    broken = (len(set(domains)) > 1 if policy == "affinity"
              else len(set(domains)) < len(domains))
    if broken:
        raise ClaimRace(f"group {group.id}: {policy} at scope {scope} no longer holds "
                        f"with {sorted(set(domains))}", group_id=group.id)


class ClaimVCluster(FleetTask):
    """Every new server on its host and every new volume's DISK_GB on its
    backend, in one multi-consumer write: all of them or none.

    Raises ClaimRace when the cloud changed since the schedule (the retry
    schedules again). Revert: releases every new member's allocation and
    group memberships, whatever the result says (a crash may come between
    the write and the saved result).
    """

    def execute(self, vcluster_id: str, vcluster_placement: dict, tenant_id: str,
                fence=None) -> list:
        rt = runtime.get()
        placement, ids = vcluster_placement, vcluster_placement["ids"]
        new = set(placement["new"])
        hosts = {n: c[0] for n, c in placement["hosts"].items() if n in new}
        backends = {n: c[0] for n, c in placement["backends"].items() if n in new}
        with rt.database.session() as session:
            resources = _server_resources(session, [ids[n] for n in hosts])
            sizes = dict(session.execute(sa.select(Volume.id, Volume.size_gb).where(
                Volume.id.in_([ids[n] for n in backends]))).all())
        claims = {ids[n]: {placement["host_uuids"][h]: resources[ids[n]]}
                  for n, h in hosts.items()}
        claims.update({ids[n]: {placement["backend_uuids"][b]: {"DISK_GB": sizes[ids[n]]}}
                       for n, b in backends.items()})
        try:
            with rt.database.session() as session:
                server_groups_joined(session, vcluster_id, placement)
            if claims:
                rt.placement.claim_many(claims, project_id=tenant_id, user_id=tenant_id,
                                        fence=fence)
        except PlacementConflict as exc:
            self._leave(rt, [ids[n] for n in hosts])
            raise ClaimRace(f"vcluster {vcluster_id}: {exc}") from exc
        try:
            self._record(rt, vcluster_id, ids, hosts, backends)
        except ClaimRace:
            rt.placement.release_many(list(claims), fence=fence)
            self._leave(rt, [ids[n] for n in hosts])
            raise
        return sorted(new)

    @staticmethod
    def _record(rt, vcluster_id: str, ids: dict, hosts: dict, backends: dict) -> None:
        with rt.database.session() as session:
            refuse_closed_hosts(session, hosts.values())
            rows.record_first_attempts(session, {ids[n]: h for n, h in hosts.items()},
                                       status=states.BUILDING,
                                       task_state=states.TASK_SPAWNING)
            vc_rows.VOLUME_ROWS.update_each(session, {
                ids[name]: {"backend": backend, "status": states.VOLUME_CREATING}
                for name, backend in backends.items()})
            if _creating(session, vcluster_id):
                vc_rows.set_status(session, vcluster_id, states.BUILDING)

    @staticmethod
    def _leave(rt, instance_ids: list[str]) -> None:
        with rt.database.session() as session:
            for instance_id in instance_ids:
                groups.leave(session, instance_id)

    def revert(self, vcluster_placement: dict | None = None, fence=None, **kwargs) -> None:
        if not vcluster_placement:
            return
        rt = runtime.get()
        ids = vcluster_placement["ids"]
        consumers = [ids[n] for n in vcluster_placement["new"]]
        rt.placement.release_many(consumers, fence=fence)
        self._leave(rt, [ids[n] for n in vcluster_placement["new"]
                         if n in vcluster_placement["hosts"]])


def _creating(session, vcluster_id: str) -> bool:
    return vc_rows.get(session, vcluster_id).status == states.SCHEDULING


def _server_resources(session, instance_ids: list[str]) -> dict[str, dict]:
    from fleetflow.persistence.models import Flavor

    flavors = {}
    result = {}
    for instance_id, flavor_id in session.execute(
            sa.select(Instance.id, Instance.flavor_id).where(Instance.id.in_(instance_ids))):
        if flavor_id not in flavors:
            flavors[flavor_id] = session.get(Flavor, flavor_id).resources
        result[instance_id] = dict(flavors[flavor_id])
    return result


class FinishVCluster(FleetTask):
    """The cluster ACTIVE, its fault cleared. Revert: nothing (the lifecycle writes)."""

    def execute(self, vcluster_id: str) -> str:
        rt = runtime.get()
        with rt.database.session() as session:
            vc_rows.set_status(session, vcluster_id, states.ACTIVE, clear_fault=True)
        return states.ACTIVE
