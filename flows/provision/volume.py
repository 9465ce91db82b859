"""Data volumes: created on a storage backend the host reaches, claimed, attached.

A backend is reachable from a host when it is that host's local storage or
the shared storage of its rack. The volume's uuid derives from the
instance's, so every retry of this task names the same volume and the same
placement consumer.
"""

from __future__ import annotations

import uuid as uuidlib

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.flows import runtime
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.flows.tasks.claim import ClaimRace
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Host, Instance, StorageBackend, Volume

VOLUME_NAMESPACE = uuidlib.UUID("0c5f6a1e-93b4-4d4e-8c2a-6f1b7d3e9a11")


def volume_id_for(instance_uuid: str) -> str:
    return str(uuidlib.uuid5(VOLUME_NAMESPACE, f"{instance_uuid}/data"))


def reachable_backends(session, host: str) -> list[StorageBackend]:
    row = session.execute(sa.select(Host).where(Host.name == host)).scalar_one_or_none()
    if row is None:
        return []
    return list(session.scalars(sa.select(StorageBackend).where(sa.or_(
        StorageBackend.host_name == host,
        sa.and_(StorageBackend.scope == "rack", StorageBackend.region == row.region,
                StorageBackend.zone == row.zone, StorageBackend.rack == row.rack)))))


def pick_backend(session, host: str, size_gb: int, usage: dict) -> StorageBackend:
    """The reachable backend with the most free space that fits ``size_gb``."""
    best, best_free = None, -1
    for backend in reachable_backends(session, host):
        free = backend.capacity_gb - usage.get(backend.uuid, {}).get("DISK_GB", 0)
        if free >= size_gb and free > best_free:
            best, best_free = backend, free
    if best is None:
        raise ClaimRace(f"{host}: no reachable storage backend has {size_gb} GB free",
                        host=host)
    return best


class AttachVolume(FleetTask):
    """Create the instance's data volume near its host, claim its space, attach it.

    Revert: detaches it, releases its allocation and marks the volume DELETED
    (each step idempotent, nothing where nothing was made). The host to detach
    from is the instance row's, which the claim wrote: never the retry's
    ``host``, which a REVERTED retry no longer has.
    """

    def execute(self, instance_uuids: list, index: int, host: str | None,
                request_spec: dict, tenant_id: str, fence=None) -> dict | None:
        if host is None:
            return None
        rt = runtime.get()
        instance_uuid = instance_uuids[index]
        volume_id = volume_id_for(instance_uuid)
        size = int(request_spec["volume_gb"])
        usage = rt.placement.usages_by_provider()
        with rt.database.session() as session:
            rows.update_instance(session, instance_uuid, task_state=states.TASK_ATTACHING)
            backend = pick_backend(session, host, size, usage)
            instance = session.get(Instance, instance_uuid)
            volume = session.get(Volume, volume_id)
            if volume is None:
                volume = Volume(id=volume_id, tenant_id=tenant_id, size_gb=size)
                session.add(volume)
            volume.name = f"{instance.name}-data" if instance else None
            volume.backend, volume.status = backend.name, states.VOLUME_CREATING
            volume.instance_id = instance_uuid
            volume.reservation_id = instance.reservation_id if instance else None
            backend_uuid = backend.uuid
        from fleetflow.persistence.placement.errors import PlacementConflict

        try:
            rt.placement.claim(volume_id, {backend_uuid: {"DISK_GB": size}},
                               project_id=tenant_id, user_id=tenant_id, fence=fence)
        except PlacementConflict as exc:
            raise ClaimRace(f"{backend_uuid}: {exc}", host=host) from exc
        rt.compute.attach_volume(host, instance_uuid, volume_id, fence=fence)
        with rt.database.session() as session:
            session.get(Volume, volume_id).status = states.VOLUME_IN_USE
            rows.update_instance(session, instance_uuid, status=states.ACTIVE, task_state=None,
                                 fault=None)
        return {"volume_id": volume_id, "backend": backend_uuid}

    def revert(self, result, instance_uuids: list, index: int, fence=None,
               **kwargs) -> None:
        rt = runtime.get()
        instance_uuid = instance_uuids[index]
        volume_id = volume_id_for(instance_uuid)
        with rt.database.session() as session:
            instance = session.get(Instance, instance_uuid)
            host = instance.host if instance is not None else None
        detach_and_delete(rt, host, instance_uuid, volume_id, fence)


def detach_and_delete(rt, host: str | None, instance_uuid: str, volume_id: str,
                      fence=None) -> None:
    """Undo a data volume whatever state it reached (each step is idempotent)."""
    from fleetflow.compute.exceptions import HostDead, InstanceNotFound

    if host:
        try:
            rt.compute.ensure_detached(host, instance_uuid, volume_id, fence=fence)
        except (InstanceNotFound, HostDead):
            pass  # nothing attached any more, or a dead host's guest that goes with it
    rt.placement.release(volume_id, fence=fence)
    with rt.database.session() as session:
        volume = session.get(Volume, volume_id)
        if volume is not None:
            volume.status = states.VOLUME_DELETED
