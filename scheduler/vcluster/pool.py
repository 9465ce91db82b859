"""Backends and tentative placements of a virtual cluster pass.

:class:`Pool` holds the backends with the usage of the pass and, per host,
the backends it reaches, found once through an index by rack; a
:class:`Trial` holds one affinity unit's placement until all of it fits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from fleetflow.scheduler.snapshot import HostState
from fleetflow.scheduler.vcluster.place import BackendState
from fleetflow.scheduler.weighers import SPREAD


class Pool:
    """Backends by name with the pass's usage, reachable sets precomputed per host."""

    def __init__(self, backends: Iterable[BackendState], weigher: str):
        self.backends = sorted(backends, key=lambda b: b.name)
        if len({b.name for b in self.backends}) != len(self.backends):
            raise ValueError("backend names must be unique")
        self.used = [b.used_gb for b in self.backends]
        self.sign = 1 if weigher == SPREAD else -1
        self.local: dict[str, list[int]] = {}
        self.shared: dict[Any, list[int]] = {}
        for index, backend in enumerate(self.backends):
            if backend.scope == "host":
                if backend.host_name is not None:
                    self.local.setdefault(backend.host_name, []).append(index)
            else:
                self.shared.setdefault(backend.domain("rack"), []).append(index)
        self._reach: dict[str, tuple[int, ...]] = {}

    def reach(self, host: HostState) -> tuple[int, ...]:
        """Backends the host reaches, its own disks first."""
        found = self._reach.get(host.name)
        if found is None:
            found = self._reach[host.name] = (*self.local.get(host.name, ()),
                                              *self.shared.get(host.domain("rack"), ()))
        return found

    def free(self, index: int, extra: int = 0) -> int:
        return self.backends[index].capacity_gb - self.used[index] - extra

    def key(self, index: int, extra: int = 0) -> tuple:
        capacity = self.backends[index].capacity_gb
        share = (self.used[index] + extra) / capacity if capacity > 0 else 1.0
        return (self.sign * share, index)


def types_ok(backend: BackendState, types: frozenset[str]) -> bool:
    return types <= backend.volume_types


class Trial:
    """One unit's tentative placement: hosts, backends, usage and member counts."""

    def __init__(self) -> None:
        self.host_of: dict[str, int] = {}
        self.backend_of: dict[str, int] = {}
        self.used: dict[int, dict[str, int]] = {}
        self.gb: Counter = Counter()
        self.counts: Counter = Counter()  # (rule id, kind, domain)

    def copy(self) -> Trial:
        """An independent copy (a unit's pinned part, tried again under each anchor)."""
        other = Trial()
        other.host_of, other.backend_of = dict(self.host_of), dict(self.backend_of)
        other.used = {position: dict(used) for position, used in self.used.items()}
        other.gb, other.counts = Counter(self.gb), Counter(self.counts)
        return other
