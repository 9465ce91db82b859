"""One member's chain inside a vcluster build: a retry over its candidates around
a boot (a server) or a create (a volume); then the attachments.

The one claim for all (``ClaimVCluster``) already holds every primary; the
retry claims an alternate when it moves a member there. The candidates are
the scheduler's alternates, each keeping every grouping with the other
members where they are. Out of candidates, the run reverts.
"""

from __future__ import annotations

import logging
from concurrent import futures

import sqlalchemy as sa
from taskflow import retry

from fleetflow.common import states
from fleetflow.common.exceptions import FleetflowError, StaleFence
from fleetflow.compute.exceptions import HostDead, InstanceNotFound
from fleetflow.flows import runtime
from fleetflow.flows.tasks.base import FleetRetry, FleetTask
from fleetflow.flows.tasks.claim import ClaimRace, join_group, refuse_closed_hosts
from fleetflow.flows.vcluster import storage_routes
from fleetflow.flows.vcluster.build_tasks import VClusterNoValidHost
from fleetflow.persistence import reservations as rows
from fleetflow.persistence import vclusters as vc_rows
from fleetflow.persistence.models import Instance, VClusterMember, Volume
from fleetflow.persistence.placement.allocations import ConsumerWrite
from fleetflow.persistence.placement.errors import PlacementConflict

LOG = logging.getLogger(__name__)


def _kind_key(kind: str) -> str:
    return "hosts" if kind == states.MEMBER_SERVER else "backends"


def claim_alternate(kind: str, member: str, member_id: str, amounts: dict, target: str,
                    placement: dict, vcluster_id: str, tenant_id: str, fence=None) -> None:
    """Move ``member``'s claim to the alternate ``target``: the row says so first
    (a server joins its groups there, the rule checked again), then the
    allocation is replaced. Idempotent: a repeat writes nothing new.

    Raises ClaimRace when ``target`` is closed, breaks a group rule, or filled up.
    """
    rt = runtime.get()
    uuids = placement["host_uuids" if kind == states.MEMBER_SERVER else "backend_uuids"]
    wanted = {uuids[target]: dict(amounts)}

    def decide(known):
        current = known[member_id]
        if current.allocations == wanted:
            return [], None
        return [ConsumerWrite(member_id, wanted, tenant_id, tenant_id,
                              current.generation)], None
    with rt.database.session() as session:
        if kind == states.MEMBER_SERVER:
            refuse_closed_hosts(session, [target])
            for group_id in vc_rows.server_groups_of(session, vcluster_id).get(member, ()):
                join_group(session, group_id, member_id, target)
            rows.record_attempt(session, member_id, target, status=states.BUILDING,
                                task_state=states.TASK_SPAWNING)
        else:
            vc_rows.VOLUME_ROWS.update(session, member_id, backend=target,
                                       status=states.VOLUME_CREATING)
    try:
        rt.placement.read_then_write([member_id], decide, fence=fence)
    except PlacementConflict as exc:
        raise ClaimRace(f"{target}: {exc}", host=target) from exc


def create_on(volume_id: str, backend: str, size_gb: int, volume_type: str | None,
              placement: dict, fence=None) -> None:
    """Create the volume on ``backend`` (idempotent by its id) through a host that
    reaches it; the row says AVAILABLE there after. A failure is written on the
    volume row (ERROR, with the fault), then raised."""
    rt = runtime.get()
    route = placement.get("routes", {}).get(backend)
    try:
        try:
            if route is None:
                raise HostDead(f"no route to {backend} known at the schedule")
            rt.compute.create_volume(route, backend, volume_id, size_gb,
                                     volume_type=volume_type, fence=fence)
        except HostDead:
            # The route chosen at the schedule died since: look again.
            with rt.database.session() as session:
                route = storage_routes.route(session, backend, rt.conf)
            rt.compute.create_volume(route, backend, volume_id, size_gb,
                                     volume_type=volume_type, fence=fence)
    except StaleFence:
        raise  # this process lost the flow: nothing to record of the host
    except FleetflowError as exc:
        with rt.database.session() as session:
            vc_rows.VOLUME_ROWS.update(session, volume_id, status=states.VOLUME_ERROR,
                                       fault=rows.fault(exc.code, exc.message, step="create",
                                                        host=backend))
        raise
    # Committed before returning, with whatever other creates end now.
    vc_rows.VOLUME_ROWS.write(rt.database, volume_id, backend=backend,
                              status=states.VOLUME_AVAILABLE, fault=None)


def delete_made(volume_id: str, made: str | None = None, fence=None) -> None:
    """Delete the volume wherever a try may have made it: the row's backend, and
    ``made`` when that differs. Idempotent; the row's status is left as it is."""
    rt = runtime.get()
    with rt.database.session() as session:
        volume = session.get(Volume, volume_id)
        backend = volume.backend if volume is not None else None
    if made is not None and made != backend:
        storage_routes.delete_volume(rt, made, volume_id, fence)
    storage_routes.delete_volume(rt, backend or made, volume_id, fence)


class MemberCandidatesRetry(FleetRetry):
    """Provides the host (server) or backend (volume) the member's chain uses:
    its primary first, then each alternate after a failure; out of them, the
    whole run reverts.

    The one claim for all holds the primary. Moving to an alternate, this
    retry claims it before handing it out: the member's allocation is
    *replaced* (the consumer holds the alternate alone) and a server joins
    its groups there, the rule checked again under the group lock. An
    alternate that filled up meanwhile is passed over. (Claiming here, not
    in a task of the chain, spares every member an atom that would do
    nothing on the primary, which is nearly always where it stays.)

    Revert: nothing — the next try replaces the allocation, and the run's
    revert releases it.
    """

    def __init__(self, name: str, member: str, kind: str, provides: str, member_id: str,
                 amounts: dict):
        super().__init__(name=name, provides=provides)
        self.member = member
        self.kind = kind
        self.member_id = member_id
        self.amounts = dict(amounts)

    def _candidates(self, placement: dict) -> list[str]:
        return list(placement[_kind_key(self.kind)].get(self.member, []))

    def execute(self, history, vcluster_placement: dict, vcluster_id: str, tenant_id: str,
                fence=None) -> str:
        tried = list(history.provided_iter())
        candidates = self._candidates(vcluster_placement)
        for position, candidate in enumerate(candidates):
            if candidate in tried:
                continue
            if position == 0:
                return candidate
            try:
                claim_alternate(self.kind, self.member, self.member_id, self.amounts,
                                candidate, vcluster_placement, vcluster_id, tenant_id, fence)
            except ClaimRace as exc:
                LOG.info("%s: alternate %s is taken (%s)", self.name, candidate, exc)
                continue
            return candidate
        raise VClusterNoValidHost(f"{self.kind} {self.member}: every candidate failed "
                                  f"({', '.join(tried) or 'none left'})")

    def on_failure(self, history, vcluster_placement: dict, **kwargs) -> str:
        tried = set(history.provided_iter())
        if any(c not in tried for c in self._candidates(vcluster_placement)):
            return retry.RETRY
        return retry.REVERT_ALL

    def revert(self, history, *args, **kwargs) -> None:
        return None


class CreateVolume(FleetTask):
    """Create the volume on ``backend`` (idempotent by its id) through a host
    that reaches it. A failure is written on the volume row, then raised.

    Revert: deletes it from the backend it was made on (nothing if it was
    never made): the volume row's, which this try's claim (or the retry
    moving it) wrote, and the result's when that differs (after a crash in
    the middle of a later try, TaskFlow's stock engine may still hand over the
    earlier try's result; docs/engine.md). Never the retry's ``backend``,
    which a REVERTED retry no longer has.
    """

    def execute(self, volume_id: str, backend: str, size_gb: int, volume_type: str | None,
                vcluster_placement: dict, fence=None) -> dict:
        create_on(volume_id, backend, size_gb, volume_type, vcluster_placement, fence)
        return {"backend": backend}

    def revert(self, result, volume_id: str, fence=None, **kwargs) -> None:
        delete_made(volume_id, result.get("backend") if isinstance(result, dict) else None,
                    fence)
        with runtime.get().database.session() as session:
            session.execute(sa.update(Volume).where(Volume.id == volume_id).values(
                status=states.VOLUME_CREATING))


# Attachments in flight at once: each is one call to the server's host.
ATTACH_CONCURRENCY = 16


def each(call, items: list) -> None:
    """``call`` on every item, several at once; the first error is raised
    once all are done (each call is idempotent, so a re-run finishes the rest)."""
    if len(items) <= 1:
        for item in items:
            call(item)
        return
    with futures.ThreadPoolExecutor(min(ATTACH_CONCURRENCY, len(items))) as pool:
        for done in [pool.submit(call, item) for item in items]:
            done.result()


class AttachVolumes(FleetTask):
    """Attach each volume to its server (the run's new pairs), on the server's host.

    Revert: detaches them (a dead host's guest goes with its host).
    """

    def _pairs(self, session, placement: dict) -> list[tuple[str, str, str, str]]:
        """``(volume name, server name, volume id, server id)`` the run attaches."""
        new, ids = set(placement["new"]), placement["ids"]
        return [(volume, server, ids[volume], ids[server])
                for volume, server in sorted(placement["attachments"].items())
                if volume in new or server in new]

    def execute(self, vcluster_id: str, vcluster_placement: dict, fence=None) -> int:
        rt = runtime.get()
        with rt.database.session() as session:
            pairs = self._pairs(session, vcluster_placement)
            hosts = dict(session.execute(sa.select(Instance.id, Instance.host).where(
                Instance.id.in_([p[3] for p in pairs]))).all())
        each(lambda pair: rt.compute.attach_volume(hosts[pair[3]], pair[3], pair[2],
                                                    fence=fence), pairs)
        if pairs:
            with rt.database.session() as session:
                session.connection().execute(
                    sa.update(Volume.__table__).where(Volume.id == sa.bindparam("v_id"))
                    .values(status=states.VOLUME_IN_USE, instance_id=sa.bindparam("s_id")),
                    [{"v_id": p[2], "s_id": p[3]} for p in pairs])
                session.connection().execute(
                    sa.update(VClusterMember.__table__).where(
                        VClusterMember.vcluster_id == vcluster_id,
                        VClusterMember.name == sa.bindparam("v_name"))
                    .values(attach_to=sa.bindparam("s_name")),
                    [{"v_name": p[0], "s_name": p[1]} for p in pairs])
        return len(pairs)

    def revert(self, vcluster_id: str, vcluster_placement: dict | None = None, fence=None,
               **kwargs) -> None:
        if not vcluster_placement:
            return
        rt = runtime.get()
        with rt.database.session() as session:
            pairs = self._pairs(session, vcluster_placement)
            hosts = dict(session.execute(sa.select(Instance.id, Instance.host).where(
                Instance.id.in_([p[3] for p in pairs]))).all())
        def detach(pair):
            volume_id, server_id = pair[2], pair[3]
            if hosts.get(server_id):
                try:
                    rt.compute.ensure_detached(hosts[server_id], server_id, volume_id,
                                               fence=fence)
                except (InstanceNotFound, HostDead):
                    pass
        each(detach, pairs)
        with rt.database.session() as session:
            for _volume, _server, volume_id, _server_id in pairs:
                session.execute(sa.update(Volume).where(Volume.id == volume_id).values(
                    status=states.VOLUME_AVAILABLE, instance_id=None))
