"""One member's chain inside a vcluster build: a retry over its candidates around
claim -> boot (a server) or claim -> create (a volume); then the attachments.

The one claim for all (``ClaimVCluster``) already holds every primary, so a
member's claim only writes when its retry moved it to an alternate: it then
*replaces* the member's allocation (the consumer holds the alternate alone).
The candidates are the scheduler's alternates, each keeping every grouping
with the other members where they are. Out of candidates, the run reverts.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from taskflow import retry

from fleetflow.common import states
from fleetflow.common.exceptions import FleetflowError
from fleetflow.compute.exceptions import HostDead, InstanceNotFound
from fleetflow.flows import runtime
from fleetflow.flows.tasks import storage_routes
from fleetflow.flows.tasks.base import FleetRetry, FleetTask
from fleetflow.flows.tasks.claim import ClaimRace, join_group
from fleetflow.flows.tasks.vcluster import VClusterNoValidHost
from fleetflow.persistence import reservations as rows
from fleetflow.persistence import vclusters as vc_rows
from fleetflow.persistence.models import Instance, VClusterMember, Volume
from fleetflow.persistence.placement.allocations import ConsumerWrite
from fleetflow.persistence.placement.errors import PlacementConflict

LOG = logging.getLogger(__name__)


def _kind_key(kind: str) -> str:
    return "hosts" if kind == states.MEMBER_SERVER else "backends"


class MemberCandidatesRetry(FleetRetry):
    """Provides the host (server) or backend (volume) the member's chain uses;
    the next candidate after each failure, then the whole run reverts.

    Revert: nothing (the chain's tasks undo their effects).
    """

    def __init__(self, name: str, member: str, kind: str, provides: str):
        super().__init__(name=name, provides=provides)
        self.member = member
        self.kind = kind

    def _candidates(self, placement: dict) -> list[str]:
        return list(placement[_kind_key(self.kind)].get(self.member, []))

    def execute(self, history, vcluster_placement: dict) -> str:
        tried = list(history.provided_iter())
        for candidate in self._candidates(vcluster_placement):
            if candidate not in tried:
                return candidate
        raise VClusterNoValidHost(f"{self.kind} {self.member}: every candidate failed "
                                  f"({', '.join(tried)})")

    def on_failure(self, history, vcluster_placement: dict, **kwargs) -> str:
        tried = set(history.provided_iter())
        if any(c not in tried for c in self._candidates(vcluster_placement)):
            return retry.RETRY
        return retry.REVERT_ALL

    def revert(self, history, *args, **kwargs) -> None:
        return None


class ClaimMember(FleetTask):
    """Hold the member's resources on ``target`` (its retry's choice).

    On the primary the one claim did it already. On an alternate the
    allocation is replaced and, for a server, its groups are joined there
    (the rule checked again under the group lock). Raises ClaimRace when
    the alternate filled up meanwhile. Revert: nothing — the next try
    replaces the allocation, and the run's revert releases it.
    """

    def __init__(self, name: str, member: str, member_id: str, kind: str, amounts: dict,
                 **kwargs):
        super().__init__(name=name, inject={"member": member, "member_id": member_id,
                                            "kind": kind, "amounts": amounts}, **kwargs)

    def execute(self, member: str, member_id: str, kind: str, amounts: dict, target: str,
                vcluster_id: str, vcluster_placement: dict, tenant_id: str,
                fence=None) -> dict:
        rt = runtime.get()
        key = _kind_key(kind)
        if target == vcluster_placement[key][member][0]:
            return {"target": target, "fast_path": True}
        uuids = vcluster_placement["host_uuids" if kind == states.MEMBER_SERVER
                                   else "backend_uuids"]
        wanted = {uuids[target]: dict(amounts)}

        def decide(known):
            current = known[member_id]
            if current.allocations == wanted:
                return [], None
            return [ConsumerWrite(member_id, wanted, tenant_id, tenant_id,
                                  current.generation)], None
        with rt.database.session() as session:
            if kind == states.MEMBER_SERVER:
                for group_id in vc_rows.server_groups_of(session, vcluster_id).get(member, ()):
                    join_group(session, group_id, member_id, target)
                rows.record_attempt(session, member_id, target, status=states.BUILDING,
                                    task_state=states.TASK_SPAWNING)
            else:
                session.execute(sa.update(Volume).where(Volume.id == member_id).values(
                    backend=target, status=states.VOLUME_CREATING))
        try:
            rt.placement.read_then_write([member_id], decide, fence=fence)
        except PlacementConflict as exc:
            raise ClaimRace(f"{target}: {exc}", host=target) from exc
        return {"target": target, "fast_path": False}


class CreateVolume(FleetTask):
    """Create the volume on ``backend`` (idempotent by its id) through a host
    that reaches it. A failure is written on the volume row, then raised.

    Revert: deletes it from that backend (nothing if it was never made).
    """

    def execute(self, volume_id: str, backend: str, size_gb: int, volume_type: str | None,
                fence=None) -> dict:
        rt = runtime.get()
        try:
            with rt.database.session() as session:
                route = storage_routes.route(session, backend, rt.conf)
            rt.compute.create_volume(route, backend, volume_id, size_gb,
                                     volume_type=volume_type, fence=fence)
        except FleetflowError as exc:
            with rt.database.session() as session:
                session.execute(sa.update(Volume).where(Volume.id == volume_id).values(
                    status=states.VOLUME_ERROR, fault=rows.fault(
                        exc.code, exc.message, step="create", host=backend)))
            raise
        with rt.database.session() as session:
            session.execute(sa.update(Volume).where(Volume.id == volume_id).values(
                backend=backend, status=states.VOLUME_AVAILABLE, fault=None))
        return {"backend": backend}

    def revert(self, volume_id: str, backend: str, fence=None, **kwargs) -> None:
        rt = runtime.get()
        storage_routes.delete_volume(rt, backend, volume_id, fence)
        with rt.database.session() as session:
            session.execute(sa.update(Volume).where(Volume.id == volume_id).values(
                status=states.VOLUME_CREATING))


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
        for _volume, _server, volume_id, server_id in pairs:
            rt.compute.attach_volume(hosts[server_id], server_id, volume_id, fence=fence)
        with rt.database.session() as session:
            for volume, server, volume_id, server_id in pairs:
                session.execute(sa.update(Volume).where(Volume.id == volume_id).values(
                    status=states.VOLUME_IN_USE, instance_id=server_id))
                session.execute(sa.update(VClusterMember).where(
                    VClusterMember.vcluster_id == vcluster_id, VClusterMember.name == volume)
                    .values(attach_to=server))
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
        for _volume, _server, volume_id, server_id in pairs:
            if hosts.get(server_id):
                try:
                    rt.compute.detach_volume(hosts[server_id], server_id, volume_id,
                                             fence=fence)
                except (InstanceNotFound, HostDead):
                    pass
        with rt.database.session() as session:
            for _volume, _server, volume_id, _server_id in pairs:
                session.execute(sa.update(Volume).where(Volume.id == volume_id).values(
                    status=states.VOLUME_AVAILABLE, instance_id=None))
