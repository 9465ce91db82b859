"""Host filters: each one named, each run once per request over the whole fleet.

Only properties that do not change while one request is placed are filtered
here (state, topology, traits, capabilities, and "fits at least one"); what
changes with every instance placed (free resources, group counts) is checked
again by the scheduler as it goes. Every run records how many hosts each
filter left, which is the explanation a ``NO_VALID_HOST`` carries.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from fleetflow.scheduler import capabilities as caps
from fleetflow.scheduler.snapshot import HostState
from fleetflow.scheduler.spec import HOST_CAPABILITIES, RequestSpec

HostPredicate = Callable[[HostState], bool]


@dataclasses.dataclass(frozen=True)
class FilterStep:
    """One filter's effect: it was given ``before`` hosts and kept ``after``.

    ``short_of``: for the resources filter, the resource classes the removed
    hosts lacked room for, most often lacking first (an operator frees or
    adds that class, not "resources").
    """

    name: str
    before: int
    after: int
    note: str = ""
    short_of: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A list when rebuilt from JSON (a flow's store, a NoValidHost's details).
        object.__setattr__(self, "short_of", tuple(self.short_of))

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["short_of"] = list(self.short_of)
        return data

    def __str__(self) -> str:
        label = f"{self.name} ({', '.join(self.short_of)})" if self.short_of else self.name
        text = f"{label}: {self.before} -> {self.after}"
        return f"{text} ({self.note})" if self.note else text


def short_of(hosts: Iterable[tuple[Mapping[str, int], Mapping[str, int]]],
             wanted: Iterable[tuple[str, int]]) -> tuple[str, ...]:
    """Resource classes some of ``hosts`` (``(capacity, used)`` pairs) lack room for.

    Ordered by how many hosts lack each, most first, then by name.
    """
    wanted = tuple(wanted)
    lacking: Counter = Counter()
    for capacity, used in hosts:
        for rc, amount in wanted:
            if capacity.get(rc, 0) - used.get(rc, 0) < amount:
                lacking[rc] += 1
    return tuple(sorted(lacking, key=lambda rc: (-lacking[rc], rc)))


def state_filter(spec: RequestSpec) -> HostPredicate:
    # Only ``up`` hosts take new instances: down ones are fenced, maintenance
    # and disabled ones are being drained by an operator, and one an
    # evacuation holds must end empty.
    return lambda host: host.takes_new_servers


def excluded_hosts_filter(spec: RequestSpec) -> HostPredicate | None:
    if not spec.excluded_hosts:
        return None
    excluded = frozenset(spec.excluded_hosts)
    return lambda host: host.name not in excluded and host.uuid not in excluded


def region_filter(spec: RequestSpec) -> HostPredicate | None:
    if not spec.region:
        return None
    return lambda host: host.region == spec.region


def zone_filter(spec: RequestSpec) -> HostPredicate | None:
    if not spec.zone:
        return None
    return lambda host: host.zone == spec.zone


def traits_filter(spec: RequestSpec) -> HostPredicate | None:
    required = frozenset(spec.required_traits)
    forbidden = frozenset(spec.forbidden_traits)
    if not required and not forbidden:
        return None
    return lambda host: required <= host.traits and not (forbidden & host.traits)


def capabilities_filter(spec: RequestSpec) -> HostPredicate | None:
    requirements = caps.parse_requirements(spec.capabilities)
    if not requirements:
        return None
    matches = caps.host_matcher(requirements)
    return lambda host: matches(host.capabilities)


def group_capabilities_filter(spec: RequestSpec) -> HostPredicate | None:
    """The host-capabilities policy: the group's requirements bind every member."""
    group = spec.group
    if group is None or HOST_CAPABILITIES not in group.policies:
        return None
    requirements = caps.parse_requirements(group.capabilities)
    if not requirements:
        return None
    matches = caps.host_matcher(requirements)
    return lambda host: matches(host.capabilities)


def resources_filter(spec: RequestSpec,
                     usage: Mapping[str, Mapping[str, int]] | None = None) -> HostPredicate | None:
    """Room for at least one instance, with allocation ratios already in capacity.

    ``usage`` overrides a host's ``used`` by host name: the scheduler passes
    what it has placed so far in this pass when it explains a failure.
    """
    wanted = tuple(spec.resources.items())
    if not wanted:
        return None
    usage = usage or {}

    def fits(host: HostState) -> bool:
        used = usage.get(host.name, host.used)
        capacity = host.capacity
        for rc, amount in wanted:
            if capacity.get(rc, 0) - used.get(rc, 0) < amount:
                return False
        return True
    return fits


def storage_filter(spec: RequestSpec,
                   backend_free: Mapping[str, int] | None = None) -> HostPredicate | None:
    """A reachable storage backend holds one more of the request's volumes.

    ``backend_free``: free GB by backend uuid (the snapshot's, or what is
    left of it during a pass).
    """
    size = spec.volume_gb
    if not size:
        return None
    free = backend_free or {}
    return lambda host: any(free.get(uuid, 0) >= size for uuid in host.backends)


def storage_note(spec: RequestSpec, removed: Iterable[HostState],
                 backend_free: Mapping[str, int] | None) -> str:
    """What the removed hosts' storage lacked: the most any of their backends has free."""
    free = backend_free or {}
    best = max((free.get(uuid, 0) for host in removed for uuid in host.backends), default=None)
    if best is None:
        return f"{spec.volume_gb} GB volumes: no storage backend reachable"
    return f"{spec.volume_gb} GB volumes: at most {max(best, 0)} GB free on a reachable backend"


# Cheap and most selective first is not needed for correctness; the order is
# the order the explanation reads in, resources last because the scheduler
# re-checks it as usage grows.
FILTERS: tuple[tuple[str, Callable[[RequestSpec], HostPredicate | None]], ...] = (
    ("state", state_filter),
    ("excluded-hosts", excluded_hosts_filter),
    ("region", region_filter),
    ("zone", zone_filter),
    ("traits", traits_filter),
    ("capabilities", capabilities_filter),
    ("host-capabilities", group_capabilities_filter),
    ("storage", storage_filter),
    ("resources", resources_filter),
)


def run_filters(spec: RequestSpec, hosts: Sequence[HostState],
                usage: Mapping[str, Mapping[str, int]] | None = None,
                backend_free: Mapping[str, int] | None = None,
                ) -> tuple[list[HostState], list[FilterStep]]:
    """Apply every filter that the request makes relevant, in order.

    ``usage`` and ``backend_free`` stand for the snapshot's when a pass
    explains why its next instance found no host.
    """
    steps: list[FilterStep] = []
    survivors = list(hosts)
    for name, build in FILTERS:
        if build is resources_filter:
            predicate = resources_filter(spec, usage)
        elif build is storage_filter:
            predicate = storage_filter(spec, backend_free)
        else:
            predicate = build(spec)
        if predicate is None:
            continue
        before = len(survivors)
        kept = [host for host in survivors if predicate(host)]
        lacking: tuple[str, ...] = ()
        note = ""
        if len(kept) < before and build in (resources_filter, storage_filter):
            passed = {id(host) for host in kept}
            removed = [host for host in survivors if id(host) not in passed]
            if build is storage_filter:
                note = storage_note(spec, removed, backend_free)
            else:
                overlay = usage or {}
                lacking = short_of(((h.capacity, overlay.get(h.name, h.used))
                                    for h in removed), spec.resources.items())
        survivors = kept
        steps.append(FilterStep(name, before, len(survivors), note=note, short_of=lacking))
    return survivors, steps
