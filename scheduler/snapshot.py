"""One view of the cloud: :class:`CloudSnapshot` of :class:`HostState` objects.

The scheduler reads nothing else, so placement is a pure function of
(request, snapshot) and can be unit-tested and benchmarked without a
database. ``snapshot_from_db`` is the one place that reads rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from fleetflow.common import states


def capacity_of(inventory: Mapping[str, Any]) -> int:
    """Placement's usable capacity of one inventory record.

    ``(total - reserved) * allocation_ratio``, rounded down like Placement.
    A bare number is taken as a total with ratio 1 (handy in tests).
    """
    if not isinstance(inventory, Mapping):
        return int(inventory)
    total = int(inventory.get("total", 0))
    reserved = int(inventory.get("reserved", 0) or 0)
    ratio = float(inventory.get("allocation_ratio", 1.0) or 1.0)
    return max(0, int((total - reserved) * ratio))


@dataclasses.dataclass
class HostState:
    """A host as the scheduler sees it; ``used`` is the only part that changes."""

    name: str
    uuid: str = ""
    state: str = states.HOST_UP
    region: str = ""
    zone: str = ""
    rack: str = ""
    capabilities: dict[str, Any] = dataclasses.field(default_factory=dict)
    traits: frozenset[str] = frozenset()
    capacity: dict[str, int] = dataclasses.field(default_factory=dict)
    used: dict[str, int] = dataclasses.field(default_factory=dict)
    recent_failures: int = 0
    # Uuids of the storage backends this host reaches (its own disk, its
    # rack's shared storage); read only for requests with a volume each.
    backends: tuple[str, ...] = ()
    # The evacuation holding this host, if any: it must end empty, so it
    # takes no new server even while it still reads ``up``.
    held_by: str | None = None

    def __post_init__(self) -> None:
        self.traits = frozenset(self.traits)
        self.backends = tuple(self.backends)
        # Topology answers capability questions too ("region=north-america")
        # unless the host states that capability itself.
        merged = {"region": self.region, "zone": self.zone, "rack": self.rack}
        merged.update(self.capabilities)
        self.capabilities = merged
        # Built once: group rules ask for them for every host of every request.
        self._domains = {"host": self.name, "rack": (self.region, self.zone, self.rack),
                         "zone": (self.region, self.zone)}

    def domain(self, scope: str) -> Any:
        """The failure domain of ``scope`` this host is in (racks repeat across zones)."""
        return self._domains[scope]

    @property
    def takes_new_servers(self) -> bool:
        """``up`` and held by no evacuation (down, maintenance, disabled: fenced or drained)."""
        return self.state == states.HOST_UP and not self.held_by

    def free(self, rc: str) -> int:
        return self.capacity.get(rc, 0) - self.used.get(rc, 0)

    def fit_count(self, resources: Mapping[str, int]) -> int:
        """How many more instances of ``resources`` fit (a large number when none asked)."""
        fits = 1 << 30
        capacity, used = self.capacity, self.used
        for rc, amount in resources.items():
            if amount > 0:
                room = (capacity.get(rc, 0) - used.get(rc, 0)) // amount
                if room < fits:
                    fits = room
        return max(fits, 0)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostState:
        """From a plain dict; ``inventory`` (Placement records) or ``capacity``."""
        capacity = dict(data.get("capacity") or {})
        for rc, record in (data.get("inventory") or {}).items():
            capacity[rc] = capacity_of(record)
        return cls(name=data["name"], uuid=data.get("uuid", ""),
                   state=data.get("state", states.HOST_UP), region=data.get("region", ""),
                   zone=data.get("zone", ""), rack=data.get("rack", ""),
                   capabilities=dict(data.get("capabilities") or {}),
                   traits=frozenset(data.get("traits") or ()), capacity=capacity,
                   used={k: int(v) for k, v in (data.get("used") or {}).items()},
                   recent_failures=int(data.get("recent_failures", 0) or 0),
                   backends=tuple(data.get("backends") or ()),
                   held_by=data.get("held_by"))


class CloudSnapshot:
    """Hosts by name, in a stable order (the scheduler's final tie-break).

    ``backend_free``: free GB of each storage backend by uuid, for requests
    that give every instance a data volume (see ``HostState.backends``).
    """

    def __init__(self, hosts: Iterable[HostState],
                 backend_free: Mapping[str, int] | None = None):
        self.backend_free: dict[str, int] = dict(backend_free or {})
        self.hosts: list[HostState] = sorted(hosts, key=lambda h: h.name)
        self.by_name: dict[str, HostState] = {h.name: h for h in self.hosts}
        if len(self.by_name) != len(self.hosts):
            raise ValueError("host names must be unique in a snapshot")

    def __len__(self) -> int:
        return len(self.hosts)

    def add_usage(self, host_name: str, resources: Mapping[str, int], count: int = 1) -> None:
        """Record ``count`` more instances on a host (e.g. after a placement is claimed)."""
        used = self.by_name[host_name].used
        for rc, amount in resources.items():
            used[rc] = used.get(rc, 0) + amount * count


def snapshot_from_db(session: Any, usage: Mapping[str, Mapping[str, int]] | None = None,
                     failures: Mapping[str, int] | None = None,
                     storage: bool = False) -> CloudSnapshot:
    """Read every Host row that has its placement provider into a snapshot.

    ``usage`` is ``{provider_uuid: {resource_class: used}}`` from the placement
    store, and ``failures`` ``{host_name: recent build failures}``; the caller
    reads both in the same transaction as ``session`` so the view is consistent.
    ``storage``: also read the storage backends, their free space and which
    hosts reach each (as the volume task picks one: the host's own, its rack's).
    """
    import sqlalchemy as sa

    # The only DB dependency.
    from fleetflow.persistence import bulk
    from fleetflow.persistence.models import Host, StorageBackend
    from fleetflow.persistence.placement.models import ResourceProvider

    usage, failures = usage or {}, failures or {}
    by_host: dict[str, list[str]] = {}
    by_rack: dict[tuple, list[str]] = {}
    backend_free: dict[str, int] = {}
    if storage:
        for backend in session.query(StorageBackend).order_by(StorageBackend.name):
            backend_free[backend.uuid] = (backend.capacity_gb
                                          - usage.get(backend.uuid, {}).get("DISK_GB", 0))
            if backend.host_name:
                by_host.setdefault(backend.host_name, []).append(backend.uuid)
            if backend.scope == "rack":
                by_rack.setdefault((backend.region, backend.zone, backend.rack),
                                   []).append(backend.uuid)
    hosts = []
    # A host whose provider is gone would look empty, rank first and lose every
    # claim aimed at it: it is left out until it is registered again (the
    # audit reports it as missing_provider).
    # Every host at once, as one row of JSON on SQLite: a 2,000-host fleet read row by
    # row, its three JSON columns parsed a value at a time, cost 50 ms a schedule.
    # The snapshot sorts its hosts by name.
    for (name, uuid, state, region, zone, rack, capabilities, traits, inventory,
         evacuation_id) in bulk.fetch(session, sa.select(
            Host.name, Host.uuid, Host.state, Host.region, Host.zone, Host.rack,
            Host.capabilities, Host.traits, Host.inventory, Host.evacuation_id)
            .join(ResourceProvider, ResourceProvider.uuid == Host.uuid), {}):
        hosts.append(HostState(
            name=name, uuid=uuid, state=state, region=region, zone=zone, rack=rack,
            capabilities=dict(capabilities or {}), traits=frozenset(traits or ()),
            capacity={rc: capacity_of(rec) for rc, rec in (inventory or {}).items()},
            used=dict(usage.get(uuid, {})), recent_failures=failures.get(name, 0),
            backends=tuple(dict.fromkeys(
                by_host.get(name, []) + by_rack.get((region, zone, rack), []))),
            held_by=evacuation_id))
    return CloudSnapshot(hosts, backend_free)


def snapshot_with_heartbeats(session: Any, usage: Mapping[str, Mapping[str, int]],
                             service_down_time: float) -> CloudSnapshot:
    """Every host, a host whose heartbeat is stale reading down."""
    import sqlalchemy as sa

    from fleetflow.persistence import evacuations as evac_rows
    from fleetflow.persistence.models import Host

    snapshot = snapshot_from_db(session, usage)
    for host in session.execute(sa.select(Host.name, Host.state, Host.heartbeat_at)
                                .where(Host.heartbeat_at.is_not(None))):
        state = evac_rows.effective_host_state(host, service_down_time)
        if state != host.state and host.name in snapshot.by_name:
            snapshot.by_name[host.name].state = state
    return snapshot
