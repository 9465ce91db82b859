"""Where a virtual cluster's members go: one view of the cloud, one joint pass.

Used by the create / add flows' schedule task and by the API's dry run. The
view: every host with its effective state (a stale heartbeat reads down),
placement usage of hosts *and* storage backends, each backend's capacity,
volume types and topology. Members that already exist (an update) are pinned
where they are: the new ones are placed around them so every grouping holds.
"""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import vclusters as vc_rows
from fleetflow.persistence.models import Flavor, Host, Instance, StorageBackend, Volume
from fleetflow.scheduler.snapshot import snapshot_with_heartbeats
from fleetflow.scheduler.vcluster.check import Place
from fleetflow.scheduler.vcluster.place import (
    BackendState,
    Grouping,
    ServerMember,
    VClusterPlacement,
    VolumeMember,
    place_vcluster,
)

ALTERNATES = 2


@dataclasses.dataclass
class ClusterInput:
    """A cluster as the scheduler takes it, with the pins of its existing members."""

    servers: list[ServerMember]
    volumes: list[VolumeMember]
    groupings: list[Grouping]
    pinned_hosts: dict[str, str] = dataclasses.field(default_factory=dict)
    pinned_backends: dict[str, str] = dataclasses.field(default_factory=dict)


def flavor_capabilities(flavor: Flavor) -> dict:
    return {k[len("capabilities:"):]: v for k, v in (flavor.extra_specs or {}).items()
            if k.startswith("capabilities:")}


def server_member(name: str, flavor: Flavor, capabilities: dict | None) -> ServerMember:
    wanted = flavor_capabilities(flavor)
    wanted.update(capabilities or {})
    return ServerMember(name=name, resources=dict(flavor.resources), capabilities=wanted)


def grouping_of(data: dict) -> Grouping:
    return Grouping(name=data["name"], members=list(data["members"]), rule=data["rule"],
                    scope=data.get("scope"))


def backend_states(session, usage: dict) -> list[BackendState]:
    return [BackendState(name=row.name, uuid=row.uuid, scope=row.scope,
                         host_name=row.host_name, region=row.region, zone=row.zone,
                         rack=row.rack, capacity_gb=int(row.capacity_gb),
                         used_gb=int(usage.get(row.uuid, {}).get("DISK_GB", 0)),
                         volume_types=frozenset(row.volume_types or ()))
            for row in session.scalars(sa.select(StorageBackend).order_by(StorageBackend.name))]


def cluster_input(session, vcluster_id: str, adding: dict[str, list[int]] | None = None,
                  rows: list | None = None) -> ClusterInput:
    """The stored cluster; members not in ``adding`` (kind -> indexes) are pinned.

    ``adding`` None: a create, nothing is pinned. Members being removed are
    left out (they will not be there). ``rows``: the cluster's member rows,
    when the caller has read them already.
    """
    if rows is None:
        rows = vc_rows.members(session, vcluster_id)
    members = [m for m in rows if not m.removing]
    servers = [m for m in members if m.kind == states.MEMBER_SERVER]
    volumes = [m for m in members if m.kind == states.MEMBER_VOLUME]
    instances = {row.id: row for row in session.execute(
        sa.select(Instance.id, Instance.flavor_id, Instance.host)
        .where(Instance.id.in_([m.resource_id for m in servers])))}
    volume_rows = {row.id: row for row in session.execute(
        sa.select(Volume.id, Volume.size_gb, Volume.volume_type, Volume.backend)
        .where(Volume.id.in_([m.resource_id for m in volumes])))}
    flavors = {row.id: row for row in session.scalars(sa.select(Flavor).where(
        Flavor.id.in_({i.flavor_id for i in instances.values()})))}
    result = ClusterInput([], [], grouping_list(session, vcluster_id))
    for m in servers:
        instance = instances[m.resource_id]
        result.servers.append(server_member(m.name, flavors[instance.flavor_id],
                                            m.spec.get("capabilities")))
        if adding is not None and m.index not in adding.get(states.MEMBER_SERVER, ()):
            result.pinned_hosts[m.name] = instance.host
    for m in volumes:
        volume = volume_rows[m.resource_id]
        result.volumes.append(VolumeMember(name=m.name, size_gb=volume.size_gb,
                                           volume_type=volume.volume_type,
                                           attach_to=m.attach_to))
        if adding is not None and m.index not in adding.get(states.MEMBER_VOLUME, ()):
            result.pinned_backends[m.name] = volume.backend
    return result


def grouping_list(session, vcluster_id: str) -> list[Grouping]:
    return [grouping_of(g) for g in vc_rows.grouping_dicts(
        vc_rows.groupings(session, vcluster_id))]


def place(session, cluster: ClusterInput, usage: dict, conf) -> VClusterPlacement:
    """One joint pass over the cloud as ``session`` and ``usage`` show it."""
    snapshot = snapshot_with_heartbeats(session, usage, conf.compute.service_down_time)
    backends = backend_states(session, usage)
    pins = {}
    if cluster.pinned_hosts:
        pins["pinned_hosts"] = cluster.pinned_hosts
    if cluster.pinned_backends:
        pins["pinned_backends"] = cluster.pinned_backends
    return place_vcluster(cluster.servers, cluster.volumes, cluster.groupings, snapshot,
                          backends, alternates=ALTERNATES, **pins)


def provider_uuids(session, placement: VClusterPlacement) -> tuple[dict, dict]:
    """``({host: uuid}, {backend: uuid})`` of every candidate in ``placement``."""
    hosts = {h for candidates in placement.hosts.values() for h in candidates}
    backends = {b for candidates in placement.backends.values() for b in candidates}
    host_uuids = dict(session.execute(sa.select(Host.name, Host.uuid).where(
        Host.name.in_(hosts))).all()) if hosts else {}
    backend_uuids = dict(session.execute(sa.select(StorageBackend.name, StorageBackend.uuid)
                                         .where(StorageBackend.name.in_(backends))).all()
                         ) if backends else {}
    return host_uuids, backend_uuids


def host_places(session, names) -> dict[str, Place]:
    names = {n for n in names if n}
    if not names:
        return {}
    return {h.name: Place(h.name, h.name, h.region, h.zone, h.rack)
            for h in session.execute(sa.select(Host.name, Host.region, Host.zone, Host.rack)
                                     .where(Host.name.in_(names)))}


def backend_places(session, names) -> dict[str, Place]:
    names = {n for n in names if n}
    if not names:
        return {}
    return {b.name: Place(b.name, b.host_name if b.scope == "host" else None, b.region,
                          b.zone, b.rack)
            for b in session.scalars(sa.select(StorageBackend).where(
                StorageBackend.name.in_(names)))}
