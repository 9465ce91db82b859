"""Place a virtual cluster's servers on hosts and its volumes on backends, in one pass.

A virtual cluster is a set of members, servers and volumes, and groupings
over them. Servers and volumes are placed together from one view of the
cloud (a :class:`CloudSnapshot` and a list of :class:`BackendState`), so a
volume lands where its server can reach it and an anti-affinity between
volumes holds against the servers placed in the same pass.

Rules of a grouping, applied pairwise to its members by kind:

============== ================================ ====================================
pair           ``affinity``                     ``anti-affinity`` (default scope)
============== ================================ ====================================
server-server  one domain of the scope (host)   different domains (host; rack, zone)
volume-volume  one backend                      different domains (rack; backend, zone)
server-volume  the server's host reaches the    the backend outside the server's
               backend (host-local, else rack)  domain (rack; host, zone)
============== ================================ ====================================

A volume is attached to a server named by its ``attach_to``, or to the one
server of an affinity grouping made of exactly that server and that volume.

The answer is all-or-nothing: either every member is placed, or
``fits`` is False, nothing is placed and ``explanation`` names the grouping
or filter that stopped the pass. The snapshot and backends are not changed.

Updating a cluster places its new members jointly with the existing ones,
*pinned* where they are (``pinned_hosts``, ``pinned_backends``). A pinned
member takes part in every grouping but stays on its host or backend: new
members go where the rules say relative to it, and it counts against every
anti-affinity. Its resources are already in the snapshot's usage and the
backends' ``used_gb`` (only new members are counted), its host is not
filtered by state (a new member still never goes to a down host), and the
answer lists it with its one host or backend and no alternates. Pinned
members already breaking a grouping between themselves: ``fits`` False,
the explanation naming the grouping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import capabilities as caps
from fleetflow.scheduler.snapshot import CloudSnapshot
from fleetflow.scheduler.weighers import SPREAD


@dataclasses.dataclass
class BackendState:
    """A storage backend as the scheduler sees it; ``used_gb`` is the part that changes.

    ``scope`` ``host``: the disk of ``host_name`` only; ``rack``: shared by
    every host of its region/zone/rack.
    """

    name: str
    uuid: str = ""
    scope: str = "rack"
    host_name: str | None = None
    region: str = ""
    zone: str = ""
    rack: str = ""
    capacity_gb: int = 0
    used_gb: int = 0
    volume_types: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.volume_types = frozenset(self.volume_types)
        if self.scope not in ("host", "rack"):
            raise InvalidInput(f"backend {self.name}: scope must be host or rack",
                               field="backends")
        # A rack-shared backend is on no one host: None never equals a host name.
        host = self.host_name if self.scope == "host" else None
        self._domains = {"backend": self.name, "host": host,
                         "rack": (self.region, self.zone, self.rack),
                         "zone": (self.region, self.zone)}

    def domain(self, scope: str) -> Any:
        """The failure domain of ``scope`` this backend is in (a host-local one: its rack)."""
        return self._domains[scope]

    @property
    def free_gb(self) -> int:
        return self.capacity_gb - self.used_gb

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackendState:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["volume_types"] = frozenset(values.get("volume_types") or ())
        return cls(**values)


@dataclasses.dataclass
class ServerMember:
    """A server of the cluster: resources by class and capability requirements."""

    name: str
    resources: dict[str, int] = dataclasses.field(default_factory=dict)
    capabilities: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for rc, amount in self.resources.items():
            if int(amount) < 0:
                raise InvalidInput(f"server {self.name}: resources.{rc} is negative",
                                   field="instances")
        self.resources = {rc: int(n) for rc, n in self.resources.items() if int(n) > 0}
        caps.parse_requirements(self.capabilities)  # fail early on bad syntax


@dataclasses.dataclass
class VolumeMember:
    """A volume of the cluster; ``volume_type`` None takes any backend."""

    name: str
    size_gb: int = 0
    volume_type: str | None = None
    attach_to: str | None = None

    def __post_init__(self) -> None:
        if int(self.size_gb) < 0:
            raise InvalidInput(f"volume {self.name}: size_gb is negative", field="instances")
        self.size_gb = int(self.size_gb)


@dataclasses.dataclass
class Grouping:
    """``rule`` (affinity | anti-affinity) over ``members``; ``scope`` None: per-kind default."""

    name: str
    members: list[str]
    rule: str
    scope: str | None = None


@dataclasses.dataclass
class VClusterPlacement:
    """The answer of one pass; everything is empty unless ``fits``.

    ``hosts``: server -> [host, alternates...]; ``backends``: volume ->
    [backend, alternates...]; ``attachments``: volume -> server;
    ``domains``: grouping -> member -> its domain at the grouping's scope
    (racks and zones written ``region/zone/rack``), to show each holds.
    """

    fits: bool
    hosts: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    backends: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    attachments: dict[str, str] = dataclasses.field(default_factory=dict)
    explanation: str | None = None
    domains: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def host_of(self, server: str) -> str | None:
        found = self.hosts.get(server)
        return found[0] if found else None

    def backend_of(self, volume: str) -> str | None:
        found = self.backends.get(volume)
        return found[0] if found else None

    def to_dict(self) -> dict[str, Any]:
        return {"fits": self.fits, "explanation": self.explanation,
                "hosts": {k: list(v) for k, v in self.hosts.items()},
                "backends": {k: list(v) for k, v in self.backends.items()},
                "attachments": dict(self.attachments),
                "domains": {g: dict(m) for g, m in self.domains.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VClusterPlacement:
        return cls(fits=bool(data["fits"]), explanation=data.get("explanation"),
                   hosts={k: list(v) for k, v in data.get("hosts", {}).items()},
                   backends={k: list(v) for k, v in data.get("backends", {}).items()},
                   attachments=dict(data.get("attachments", {})),
                   domains={g: dict(m) for g, m in data.get("domains", {}).items()})


def check_groupings(servers: Sequence[ServerMember], volumes: Sequence[VolumeMember],
                    groupings: Sequence[Grouping]) -> None:
    """Raise InvalidInput naming the first bad member, grouping or contradiction."""
    from fleetflow.scheduler.vcluster.rules import analyse

    analyse(servers, volumes, groupings)


def place_vcluster(servers: Sequence[ServerMember], volumes: Sequence[VolumeMember],
                   groupings: Sequence[Grouping], hosts: CloudSnapshot,
                   backends: Sequence[BackendState], *, alternates: int = 2,
                   weigher: str = SPREAD, pinned_hosts: Mapping[str, str] | None = None,
                   pinned_backends: Mapping[str, str] | None = None) -> VClusterPlacement:
    """Place every member or none; the same input and state give the same answer.

    ``pinned_hosts`` (server -> its host) and ``pinned_backends`` (volume ->
    its backend) name members that exist already: see the module's notes.
    A pinned name that is no server (volume) of the cluster, or a host or
    backend that does not exist, is InvalidInput (field ``instances``).
    """
    from fleetflow.scheduler.vcluster.passes import Placer
    from fleetflow.scheduler.vcluster.rules import analyse

    rules = analyse(servers, volumes, groupings)
    placer = Placer(rules, hosts, backends, weigher, pinned_hosts, pinned_backends)
    return placer.run_pass(max(0, int(alternates)))
