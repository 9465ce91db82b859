"""The storage backends a fake driver serves, and which hosts reach them.

A backend is either one host's own disk (scope ``host``: only ``host_name``
reaches it) or shared by the hosts of one rack (scope ``rack``: every host of
its region / zone / rack reaches it). Like the hosts' inventories, what a
driver serves is held in memory: each agent learns it when it starts. The
volumes on the backends live in the state file (``fake_storage``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping

from fleetflow.common.exceptions import InvalidInput
from fleetflow.compute.exceptions import BackendNotFound, BackendUnreachable

HOST_SCOPE = "host"
RACK_SCOPE = "rack"
SCOPES = (HOST_SCOPE, RACK_SCOPE)

TOPOLOGY_KEYS = ("region", "zone", "rack")


@dataclasses.dataclass(frozen=True)
class Backend:
    """A storage backend as the driver serves it."""

    name: str
    scope: str
    capacity_gb: int
    host_name: str | None = None
    region: str | None = None
    zone: str | None = None
    rack: str | None = None
    volume_types: tuple[str, ...] = ()

    @classmethod
    def from_spec(cls, name: str, spec: Mapping) -> Backend:
        scope = spec.get("scope")
        if scope not in SCOPES:
            raise InvalidInput(f"backend {name}: scope must be one of {', '.join(SCOPES)}, "
                               f"not {scope!r}", backend=name, scope=scope)
        if scope == HOST_SCOPE and not spec.get("host_name"):
            raise InvalidInput(f"backend {name}: a host-local backend needs its host_name",
                               backend=name)
        if scope == RACK_SCOPE and not all(spec.get(key) for key in TOPOLOGY_KEYS):
            raise InvalidInput(f"backend {name}: a rack backend needs its region, zone and "
                               "rack", backend=name)
        capacity_gb = int(spec.get("capacity_gb") or 0)
        if capacity_gb < 0:
            raise InvalidInput(f"backend {name}: capacity_gb {capacity_gb} is negative",
                               backend=name)
        return cls(name=name, scope=scope, capacity_gb=capacity_gb,
                   host_name=spec.get("host_name"), region=spec.get("region"),
                   zone=spec.get("zone"), rack=spec.get("rack"),
                   volume_types=tuple(spec.get("volume_types") or ()))

    def reaches(self, host: str, topology: Mapping | None) -> bool:
        """Whether ``host`` (at ``topology``, None if unknown) can attach this backend's volumes."""
        if self.scope == HOST_SCOPE:
            return host == self.host_name
        if topology is None:
            return False
        return tuple(topology.get(key) for key in TOPOLOGY_KEYS) == (
            self.region, self.zone, self.rack)

    def public(self) -> dict:
        return {"name": self.name, "scope": self.scope, "host_name": self.host_name,
                "region": self.region, "zone": self.zone, "rack": self.rack,
                "capacity_gb": self.capacity_gb, "volume_types": list(self.volume_types)}


class StorageBook:
    """The backends and host topology one driver serves (in memory)."""

    def __init__(self):
        self.backends: dict[str, Backend] = {}
        self.topology: dict[str, dict] = {}
        self.lock = threading.Lock()

    def add_backends(self, specs: Mapping[str, Mapping]) -> None:
        # All checked before any is kept: a bad spec leaves the book as it was.
        parsed = {name: Backend.from_spec(name, spec) for name, spec in specs.items()}
        with self.lock:
            self.backends.update(parsed)

    def add_topology(self, topology: Mapping[str, Mapping]) -> None:
        parsed = {host: {key: where.get(key) for key in TOPOLOGY_KEYS}
                  for host, where in topology.items()}
        with self.lock:
            self.topology.update(parsed)

    def backend(self, name: str) -> Backend:
        try:
            return self.backends[name]
        except KeyError:
            raise BackendNotFound(f"storage backend {name} is not served here",
                                  backend=name) from None

    def check_reach(self, backend: Backend, host: str) -> None:
        if not backend.reaches(host, self.topology.get(host)):
            where = (f"the disk of {backend.host_name}" if backend.scope == HOST_SCOPE
                     else f"shared by rack {backend.region}/{backend.zone}/{backend.rack}")
            raise BackendUnreachable(f"host {host} cannot reach storage backend "
                                     f"{backend.name} ({where})", host=host,
                                     backend=backend.name, scope=backend.scope)
