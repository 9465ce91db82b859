"""Host filters: each one named, each run once per request over the whole fleet.

Only properties that do not change while one request is placed are filtered
here (state, topology, traits, capabilities, and "fits at least one"); what
changes with every instance placed (free resources, group counts) is checked
again by the scheduler as it goes. Every run records how many hosts each
filter left, which is the explanation a ``NO_VALID_HOST`` carries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from fleetflow.common import states
from fleetflow.scheduler import capabilities as caps
from fleetflow.scheduler.snapshot import HostState
from fleetflow.scheduler.spec import HOST_CAPABILITIES, RequestSpec

HostPredicate = Callable[[HostState], bool]


@dataclasses.dataclass(frozen=True)
class FilterStep:
    """One filter's effect: it was given ``before`` hosts and kept ``after``."""

    name: str
    before: int
    after: int
    note: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        text = f"{self.name}: {self.before} -> {self.after}"
        return f"{text} ({self.note})" if self.note else text


def state_filter(spec: RequestSpec) -> HostPredicate:
    # Only ``up`` hosts take new instances: down ones are fenced, maintenance
    # and disabled ones are being drained by an operator.
    return lambda host: host.state == states.HOST_UP


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
    ("resources", resources_filter),
)


def run_filters(spec: RequestSpec, hosts: Sequence[HostState],
                usage: Mapping[str, Mapping[str, int]] | None = None,
                ) -> tuple[list[HostState], list[FilterStep]]:
    """Apply every filter that the request makes relevant, in order."""
    steps: list[FilterStep] = []
    survivors = list(hosts)
    for name, build in FILTERS:
        predicate = resources_filter(spec, usage) if build is resources_filter else build(spec)
        if predicate is None:
            continue
        before = len(survivors)
        survivors = [host for host in survivors if predicate(host)]
        steps.append(FilterStep(name, before, len(survivors)))
    return survivors, steps
