"""Deleting instances: guest, data volume, allocation and group membership.

Every step is idempotent, so a teardown interrupted by a crash simply runs
again. Deleting is never reverted: a teardown that fails stops, and the
operator resumes it once the cause (a dead host, say) is dealt with.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.exceptions import FleetflowError
from fleetflow.compute.exceptions import HostDead
from fleetflow.flows import runtime
from fleetflow.flows.provision.volume import detach_and_delete, volume_id_for
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import groups
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Instance, Reservation, Volume

LOG = logging.getLogger(__name__)


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
            if has_volume:
                detach_and_delete(rt, host, instance_id, volume_id_for(instance_id), fence)
            if host:
                try:
                    rt.compute.ensure_destroyed(host, instance_id, fence=fence)
                except HostDead:
                    # The row says DELETED below, and a host that comes back
                    # destroys the guests the database says are deleted: the
                    # deletion need not wait for a dead host.
                    LOG.info("%s: host %s is dead; its copy goes when it returns",
                             instance_id, host)
            rt.placement.release(instance_id, fence=fence)
        except FleetflowError as exc:
            with rt.database.session() as session:
                rows.update_instance(session, instance_id, status=states.ERROR,
                                     task_state=None, fault=rows.fault(
                                         exc.code, exc.message, step="delete", host=host))
            raise
        with rt.database.session() as session:
            if group_id or in_vcluster:
                # A vcluster's server may be in several groups: it leaves them all.
                groups.leave(session, instance_id)
            rows.update_instance(session, instance_id, status=states.DELETED,
                                 task_state=None)
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
