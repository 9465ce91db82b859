"""Deleting instances: guest, data volume, allocation and group membership.

Every step is idempotent, so a teardown interrupted by a crash simply runs
again. Deleting is never reverted: a teardown that fails stops, and the
operator resumes it once the cause (a dead host, say) is dealt with.

A teardown of more than ``[conductor] instances_per_atom`` instances deletes
them in groups (:class:`DeleteInstances`): an atom an instance cost the engine,
and the instance its own transactions and claim release, many times what the
delete itself costs. A group reads its rows in one statement, marks them
DELETING in one, destroys the guests in one call an agent, releases the claims
in one write and says DELETED in one statement; its re-run skips what is
DELETED already.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common import crash_points, states
from fleetflow.common.exceptions import FleetflowError, StaleFence
from fleetflow.flows import runtime
from fleetflow.flows.provision.volume import detach_and_delete, volume_id_for
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.flows.tasks.destroy import destroy_alone, destroy_guests
from fleetflow.flows.tasks.members import failures
from fleetflow.persistence import bulk, groups
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Instance, Reservation, Volume


class DeleteInstance(FleetTask):
    """Destroy the guest, delete its volume, free its allocation, leave its group.

    Revert: nothing — a deletion is finished by resuming, not undone.
    """

    def execute(self, instance_id: str, fence=None) -> None:
        rt = runtime.get()
        with rt.database.session() as session:
            instance = session.get(Instance, instance_id)
            if instance is None or instance.status == states.DELETED:
                return None
            host, group_id = instance.host, instance.group_id
            in_vcluster = instance.vcluster_id is not None
            has_volume = session.get(Volume, volume_id_for(instance_id)) is not None
            # The rule every delete follows: not while a move holds the server
            # (the teardown stops, and is resumed once the move has ended).
            evac_rows.hold_for_delete(session, [instance_id], statuses=None)
        try:
            _delete_guest(rt, instance_id, host, has_volume, fence)
            rt.placement.release(instance_id, fence=fence)
        except FleetflowError as exc:
            with rt.database.session() as session:
                _record_failure(session, instance_id, host, exc)
            raise
        with rt.database.session() as session:
            if group_id or in_vcluster:
                # A vcluster's server may be in several groups: it leaves them all.
                groups.leave(session, instance_id)
            rows.update_instance(session, instance_id, status=states.DELETED,
                                 task_state=None)
        return None


def _delete_guest(rt, instance_id: str, host: str | None, has_volume: bool, fence) -> None:
    """The instance's data volume and guest gone (each step idempotent)."""
    if has_volume:
        detach_and_delete(rt, host, instance_id, volume_id_for(instance_id), fence)
    if host:
        destroy_alone(rt, host, instance_id, fence)


def _record_failure(session, instance_id: str, host: str | None, exc: FleetflowError) -> None:
    rows.update_instance(session, instance_id, status=states.ERROR, task_state=None,
                         fault=rows.fault(exc.code, exc.message, step="delete", host=host))


class DeleteInstances(FleetTask):
    """:class:`DeleteInstance` for a group of instances (``instance_ids``).

    The guests go in one call an agent (``compute/destroy_batches.py``), each
    data volume on its own first. Every member's guest is destroyed before the
    group fails: a member whose delete fails is left ERROR with its fault (its
    claim kept), the others are DELETED, then the first failure is raised;
    resuming deletes what is left.
    StaleFence (this process lost the flow) is raised with nothing recorded.

    Revert: nothing, as for :class:`DeleteInstance`.
    """

    def execute(self, instance_ids: list, fence=None) -> None:
        rt = runtime.get()
        table = Instance.__table__
        with rt.database.session() as session:
            live = [row for row in bulk.select_ids(
                session, (table.c.id, table.c.status, table.c.host, table.c.group_id,
                          table.c.vcluster_id), instance_ids) if row[1] != states.DELETED]
            if not live:
                return None
            volumes = {row[0] for row in bulk.select_ids(
                session, (Volume.__table__.c.id,), [volume_id_for(row[0]) for row in live])}
            evac_rows.hold_for_delete(session, [row[0] for row in live], statuses=None)
        hosts = {row[0]: row[2] for row in live}
        # Volumes first (detached, then deleted), each on its own; then the guests.
        failed = failures(lambda uuid: detach_and_delete(
            rt, hosts[uuid], uuid, volume_id_for(uuid), fence),
            [uuid for uuid in hosts if volume_id_for(uuid) in volumes])
        failed.update(destroy_guests(rt, {uuid: host for uuid, host in hosts.items()
                                    if host and uuid not in failed}, fence))
        for error in failed.values():
            if isinstance(error, StaleFence) or not isinstance(error, FleetflowError):
                raise error
        crash_points.maybe_crash(self.name, crash_points.MEMBERS_DESTROYED)
        gone = [row for row in live if row[0] not in failed]
        rt.placement.release_many([row[0] for row in gone], fence=fence)
        with rt.database.session() as session:
            # A vcluster's server may be in several groups: it leaves them all.
            groups.leave_all(session, [row[0] for row in gone if row[3] or row[4]])
            rows.update_instances(session, [row[0] for row in gone], status=states.DELETED,
                                  task_state=None)
            for uuid, error in failed.items():
                _record_failure(session, uuid, hosts[uuid], error)
        if failed:
            raise next(iter(failed.values()))
        return None


class FinishReservationTeardown(FleetTask):
    """The reservation is DELETED once none of its instances is left.

    Revert: nothing.
    """

    def execute(self, reservation_id: str | None) -> None:
        if not reservation_id:
            return None
        rt = runtime.get()
        with rt.database.session() as session:
            left = session.scalar(sa.select(sa.func.count()).select_from(Instance).where(
                Instance.reservation_id == reservation_id,
                Instance.status.not_in((states.DELETED, states.REVERTED))))
            reservation = session.get(Reservation, reservation_id)
            if reservation is not None and not left:
                rows.set_status(session, reservation_id, states.DELETED)
        return None
