"""Where an evacuation's servers go: one view of the cloud, one pass (:mod:`.place`).

Used by the schedule task (every server of a run), by a retry that ran out
of candidates (one server, afresh) and by the API's dry run. The view: every
host with its *effective* state (a stale heartbeat reads down), placement
usage, each server's flavor, capabilities, server group (its members still
to be moved left out) and the storage its volumes need.
"""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence.models import (
    Evacuation,
    Flavor,
    Host,
    Instance,
    Reservation,
    ServerGroup,
)
from fleetflow.scheduler.moves.place import ServerToMove, place_moves
from fleetflow.scheduler.snapshot import snapshot_with_heartbeats
from fleetflow.scheduler.spec import GroupSpec


@dataclasses.dataclass
class MovePlan:
    """Candidates per server uuid, and why the others cannot move: ``{uuid: (code, msg)}``."""

    candidates: dict[str, list[str]]
    unplaced: dict[str, tuple[str, str]]
    #: What each server is: source, mode, resources, image, whether it has volumes.
    servers: dict[str, dict] = dataclasses.field(default_factory=dict)


def _flavor_capabilities(flavor: Flavor) -> dict:
    return {k[len("capabilities:"):]: v for k, v in (flavor.extra_specs or {}).items()
            if k.startswith("capabilities:")}


class _Builder:
    """Turns instance rows into the scheduler's ServerToMove, caching shared rows."""

    def __init__(self, session, evacuation: Evacuation):
        self.session = session
        self.evacuation = evacuation
        self.flavors: dict[str, Flavor] = {}
        self.groups: dict[str, GroupSpec] = {}
        self.requested: dict[str, dict] = {}
        # Members this evacuation has not moved yet: they will not stay where
        # the group rows say, so they must not constrain each other.
        self.unlanded = [m.instance_id for m in evac_rows.moves(session, evacuation.id)
                         if m.status != states.DONE]
        self.rack_hosts: dict[tuple, list[str]] = {}

    def _flavor(self, flavor_id: str) -> Flavor:
        if flavor_id not in self.flavors:
            self.flavors[flavor_id] = self.session.get(Flavor, flavor_id)
        return self.flavors[flavor_id]

    def _group(self, group_id: str) -> GroupSpec | None:
        if group_id not in self.groups:
            row = self.session.get(ServerGroup, group_id)
            self.groups[group_id] = (GroupSpec.from_row(row, exclude_instances=self.unlanded)
                                     if row is not None else None)
        return self.groups[group_id]

    def _requested(self, reservation_id: str | None) -> dict:
        if not reservation_id:
            return {}
        if reservation_id not in self.requested:
            row = self.session.get(Reservation, reservation_id)
            spec = ((row.request or {}).get("spec") or {}) if row is not None else {}
            self.requested[reservation_id] = dict(spec.get("capabilities") or {})
        return self.requested[reservation_id]

    def _hosts_of_rack(self, key: tuple) -> list[str]:
        if key not in self.rack_hosts:
            region, zone, rack = key
            self.rack_hosts[key] = list(self.session.scalars(sa.select(Host.name).where(
                Host.region == region, Host.zone == zone, Host.rack == rack)))
        return self.rack_hosts[key]

    def info(self, instance: Instance, has_volumes: bool) -> dict:
        mode = self.evacuation.mode
        return {"source": instance.host,
                "mode": states.MODE_LIVE if mode == states.MODE_DRAIN else mode,
                "resources": self._flavor(instance.flavor_id).resources,
                "image": instance.image_id, "volumes": has_volumes}

    def server(self, instance: Instance, attached: list) -> ServerToMove | tuple[str, str]:
        """The server to place, or (code, message) when it cannot move at all."""
        flavor = self._flavor(instance.flavor_id)
        needed = []
        for volume, backend in attached:
            if backend is None:
                continue
            if backend.scope == "host":
                if self.evacuation.mode != states.MODE_REBUILD:
                    return (evac_rows.VOLUME_UNREACHABLE,
                            f"volume {volume.id} is on {backend.host_name}'s own disk: a "
                            f"{self.evacuation.mode} move cannot take it along")
                continue  # lost with the dead host; recorded at confirm
            needed.append(self._hosts_of_rack((backend.region, backend.zone, backend.rack)))
        capabilities = _flavor_capabilities(flavor)
        capabilities.update(self._requested(instance.reservation_id))
        return ServerToMove(key=instance.id, source=instance.host, resources=flavor.resources,
                            capabilities=capabilities,
                            group=self._group(instance.group_id) if instance.group_id else None,
                            backends_needed=needed)


def plan(session, evacuation: Evacuation, uuids: list[str], usage: dict, conf,
         excluded_hosts=(), alternates: int | None = None, as_up=()) -> MovePlan:
    """Candidates for the servers ``uuids`` of ``evacuation`` on the cloud as it is now.

    ``as_up``: hosts read ``up`` whatever their state (a dry run of a recovery
    that would bring its reserve pool into service first).
    """
    builder = _Builder(session, evacuation)
    instances = {i.id: i for i in session.scalars(
        sa.select(Instance).where(Instance.id.in_(uuids)))}
    volumes = evac_rows.attached_volumes_of(session, list(instances))
    servers, unplaced, infos = [], {}, {}
    for uuid in uuids:
        instance = instances.get(uuid)
        if instance is None or instance.status in (states.DELETING, states.DELETED):
            unplaced[uuid] = ("MOVE_NOT_POSSIBLE", f"server {uuid} is being deleted")
            continue
        attached = volumes.get(uuid, [])
        infos[uuid] = builder.info(instance, bool(attached))
        server = builder.server(instance, attached)
        if isinstance(server, tuple):
            unplaced[uuid] = server
        else:
            servers.append(server)
    snapshot = snapshot_with_heartbeats(session, usage, conf.compute.service_down_time)
    for name in as_up:
        if name in snapshot.by_name:
            snapshot.by_name[name].state = states.HOST_UP
    result = place_moves(servers, snapshot,
                         excluded_hosts=[*evacuation.hosts, *excluded_hosts],
                         target_hosts=evacuation.target_hosts,
                         alternates=conf.scheduler.alternates if alternates is None
                         else alternates, weigher=conf.scheduler.weigher)
    for key, why in result.unplaced.items():
        # A group's own rule left no host (an affinity unit, or anti-affinity
        # taking the last hosts): say so; otherwise capacity or filters did.
        by_group = why.startswith("group") or "-> 0 (group" in why
        code = evac_rows.GROUP_POLICY if by_group else evac_rows.NO_VALID_HOST
        unplaced[key] = (code, why)
    return MovePlan(dict(result.candidates), unplaced, infos)
