"""Taking members out of a vcluster, or the whole cluster down.

detach -> delete each volume and destroy each server -> release -> finish;
a teardown of more than ``[conductor] instances_per_atom`` members deletes its
volumes and destroys its servers in groups of that many, a task a group (its
servers' guests in one call an agent).
The per-member atoms only act on the hosts and the storage (idempotent by
id); ``release`` then frees every allocation of the leaving members in one
placement write and records them DELETED in a few statements, so a
teardown of hundreds of members pays a handful of database writes, not
several per member. Every step is idempotent, so a teardown cut by a crash
runs again from where it stood; none is reverted (an operator resumes a
stopped teardown). A dead host never blocks it: a guest on it is left for
the host to destroy when it returns (the database says it is deleted), an
attachment to it is forced off at the backend, and a volume on its own
disk is recorded deleted with its allocation freed.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.exceptions import FleetflowError, StaleFence
from fleetflow.compute.exceptions import HostDead, InstanceNotFound
from fleetflow.flows import runtime
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.flows.tasks.destroy import destroy_guests
from fleetflow.flows.vcluster import storage_routes
from fleetflow.flows.vcluster.members import each
from fleetflow.persistence import bulk
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import reservations as rows
from fleetflow.persistence import vclusters as vc_rows
from fleetflow.persistence.models import GroupMember, Instance, VClusterMember, Volume

LOG = logging.getLogger(__name__)


class DetachLeaving(FleetTask):
    """Detach every volume that leaves, and every volume attached to a server that leaves.

    Revert: nothing.
    """

    def execute(self, vcluster_id: str, servers: list, volumes: list, fence=None) -> int:
        rt = runtime.get()
        with rt.database.session() as session:
            server_rows, volume_rows = vc_rows.members_of(session, vcluster_id, servers,
                                                          volumes)
            server_ids = [m.resource_id for m in server_rows]
            volume_ids = [m.resource_id for m in volume_rows]
            # The rule every delete follows: not while a move holds a server
            # (the teardown stops before detaching anything, resumed once it has ended).
            evac_rows.hold_for_delete(session, server_ids, statuses=None)
            attached = session.execute(sa.select(Volume.id, Volume.instance_id, Volume.backend)
                                       .where(Volume.vcluster_id == vcluster_id,
                                              Volume.instance_id.is_not(None),
                                              sa.or_(Volume.id.in_(volume_ids),
                                                     Volume.instance_id.in_(server_ids)))
                                       ).all()
            hosts = dict(session.execute(sa.select(Instance.id, Instance.host).where(
                Instance.id.in_([a.instance_id for a in attached]))).all())
        each(lambda a: self._detach(rt, hosts.get(a.instance_id), a.instance_id, a.id,
                                    a.backend, fence), attached)
        if attached:
            with rt.database.session() as session:
                session.execute(sa.update(Volume).where(
                    Volume.id.in_([a.id for a in attached]))
                    .values(status=states.VOLUME_AVAILABLE, instance_id=None))
        return len(attached)

    @staticmethod
    def _detach(rt, host, server_id, volume_id, backend, fence) -> None:
        if host:
            try:
                rt.compute.ensure_detached(host, server_id, volume_id, fence=fence)
                return
            except InstanceNotFound:
                return
            except HostDead:
                pass
        # The guest's host is dead: free the volume where it lives.
        with rt.database.session() as session:
            candidates = storage_routes.routes(session, backend, rt.conf)
        for route in candidates:
            try:
                rt.compute.ensure_force_detached(route, backend, volume_id, fence=fence)
                return
            except HostDead:
                continue


class DeleteMemberVolume(FleetTask):
    """Delete one volume from its backend (``release`` frees its space). Revert: nothing."""

    def execute(self, volume_id: str, fence=None) -> bool:
        rt = runtime.get()
        with rt.database.session() as session:
            volume = session.get(Volume, volume_id)
            if volume is None or volume.status == states.VOLUME_DELETED:
                return False
            backend = volume.backend
        return storage_routes.delete_volume(rt, backend, volume_id, fence)


class DestroyMemberServer(FleetTask):
    """Destroy one server's guest on its host (``release`` frees its resources).

    A dead host's guest is left to the host, which destroys on its return
    what the database says is deleted. Any other failure is written on the
    server's row, then raised (the teardown stops for an operator).

    Revert: nothing.
    """

    def execute(self, instance_id: str, fence=None) -> None:
        rt = runtime.get()
        with rt.database.session() as session:
            instance = session.get(Instance, instance_id)
            if instance is None or instance.status == states.DELETED or not instance.host:
                return None
            host = instance.host
        try:
            rt.compute.ensure_destroyed(host, instance_id, fence=fence)
        except HostDead:
            LOG.info("%s: host %s is dead; its copy goes when it returns", instance_id, host)
        except FleetflowError as exc:
            with rt.database.session() as session:
                rows.update_instance(session, instance_id, status=states.ERROR,
                                     task_state=None, fault=rows.fault(
                                         exc.code, exc.message, step="delete", host=host))
            raise
        return None


class DeleteMemberVolumes(FleetTask):
    """:class:`DeleteMemberVolume` for a group of volumes (``volume_ids``), several at
    once; the first failure is raised once every one has ended. Revert: nothing."""

    def execute(self, volume_ids: list, fence=None) -> int:
        rt = runtime.get()
        table = Volume.__table__
        with rt.database.session() as session:
            live = [(volume_id, backend) for volume_id, status, backend in bulk.select_ids(
                session, (table.c.id, table.c.status, table.c.backend), volume_ids)
                if status != states.VOLUME_DELETED]
        each(lambda volume: storage_routes.delete_volume(rt, volume[1], volume[0], fence),
             live)
        return len(live)


class DestroyMemberServers(FleetTask):
    """:class:`DestroyMemberServer` for a group of servers (``instance_ids``), their
    guests in one call an agent (``flows/tasks/destroy.py``). A server whose destroy
    fails is written ERROR with its fault; the first failure is raised once every
    guest of the group was tried. Revert: nothing."""

    def execute(self, instance_ids: list, fence=None) -> int:
        rt = runtime.get()
        table = Instance.__table__
        with rt.database.session() as session:
            hosts = {uuid: host for uuid, status, host in bulk.select_ids(
                session, (table.c.id, table.c.status, table.c.host), instance_ids)
                if status != states.DELETED and host}
        failed = destroy_guests(rt, hosts, fence)
        for error in failed.values():
            if isinstance(error, StaleFence) or not isinstance(error, FleetflowError):
                raise error  # this process lost the flow, or a bug: nothing recorded
        if failed:
            with rt.database.session() as session:
                for uuid, error in failed.items():
                    rows.update_instance(session, uuid, status=states.ERROR, task_state=None,
                                         fault=rows.fault(error.code, error.message,
                                                          step="delete", host=hosts[uuid]))
            raise next(iter(failed.values()))
        return len(hosts)


class ReleaseLeaving(FleetTask):
    """Free every leaving member's allocation in one write; record them DELETED and
    out of their groups. Revert: nothing."""

    def execute(self, vcluster_id: str, servers: list, volumes: list, fence=None) -> int:
        rt = runtime.get()
        with rt.database.session() as session:
            server_rows, volume_rows = vc_rows.members_of(session, vcluster_id, servers,
                                                          volumes)
        server_ids = [m.resource_id for m in server_rows]
        volume_ids = [m.resource_id for m in volume_rows]
        dropped = rt.placement.release_many([*server_ids, *volume_ids], fence=fence)
        with rt.database.session() as session:
            if server_ids:
                session.execute(sa.delete(GroupMember).where(
                    GroupMember.instance_id.in_(server_ids)))
                rows.update_instances(session, server_ids, status=states.DELETED,
                                      task_state=None)
            if volume_ids:
                session.execute(sa.update(Volume).where(Volume.id.in_(volume_ids)).values(
                    status=states.VOLUME_DELETED, instance_id=None))
        return dropped


class FinishVClusterTeardown(FleetTask):
    """Remove: forget the members, groupings lose them, the cluster ACTIVE again.
    Delete: the cluster's server groups go and the cluster is DELETED.

    Revert: nothing.
    """

    def execute(self, vcluster_id: str, vcluster_run: str, servers: list,
                volumes: list) -> str:
        rt = runtime.get()
        with rt.database.session() as session:
            if vcluster_run == states.RUN_DELETE:
                vc_rows.delete_owned_groups(session, vcluster_id)
                vc_rows.set_status(session, vcluster_id, states.DELETED, clear_fault=True)
                return states.DELETED
            server_rows, volume_rows = vc_rows.members_of(session, vcluster_id, servers,
                                                          volumes)
            vc_rows.drop_members(session, vcluster_id,
                                 [m.name for m in [*server_rows, *volume_rows]])
            session.execute(sa.update(VClusterMember).where(
                VClusterMember.vcluster_id == vcluster_id,
                VClusterMember.attach_to.in_([m.name for m in server_rows]))
                .values(attach_to=None))
            vc_rows.sync_group_ids(session, vcluster_id)
            vc_rows.set_status(session, vcluster_id, states.ACTIVE, clear_fault=True)
        return states.ACTIVE
