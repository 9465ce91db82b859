"""What is being asked for: :class:`RequestSpec` and its :class:`GroupSpec`.

Both are plain dataclasses with ``to_dict``/``from_dict`` so a flow can keep
them in its store (JSON) and any conductor can rebuild them on resume.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import capabilities as caps

AFFINITY = "affinity"
ANTI_AFFINITY = "anti-affinity"
SOFT_AFFINITY = "soft-affinity"
SOFT_ANTI_AFFINITY = "soft-anti-affinity"
NETWORK_PROXIMITY = "network-proximity"
HOST_CAPABILITIES = "host-capabilities"
POLICIES = (AFFINITY, ANTI_AFFINITY, SOFT_AFFINITY, SOFT_ANTI_AFFINITY, NETWORK_PROXIMITY,
            HOST_CAPABILITIES)
# At most one of these: they say opposite things about the same scope.
PLACEMENT_POLICIES = (AFFINITY, ANTI_AFFINITY, SOFT_AFFINITY, SOFT_ANTI_AFFINITY)

SCOPES = ("host", "rack", "zone")
RESOURCE_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB", "GPU")


@dataclasses.dataclass
class GroupSpec:
    """A server group as the scheduler needs it.

    ``member_hosts`` lists the host of every current member that is already
    placed, one entry per member (two members on ``h1`` -> ``["h1", "h1"]``);
    the instances being scheduled must not be in it. ``max_per_host`` bounds
    members per failure domain of ``scope`` (per host when the scope is
    ``host``, per rack for ``rack``...); None means 1 for anti-affinity.
    """

    id: str | None = None
    policies: list[str] = dataclasses.field(default_factory=list)
    scope: str = "host"
    max_per_host: int | None = None
    capabilities: dict[str, Any] = dataclasses.field(default_factory=dict)
    member_hosts: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.policies = list(dict.fromkeys(self.policies or []))
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise InvalidInput(f"group.policies: unknown policy {unknown[0]!r}; "
                               f"expected some of {', '.join(POLICIES)}", field="group.policies")
        placing = [p for p in self.policies if p in PLACEMENT_POLICIES]
        if len(placing) > 1:
            raise InvalidInput(f"group.policies: {placing[0]!r} and {placing[1]!r} "
                               "contradict each other", field="group.policies")
        if self.scope not in SCOPES:
            raise InvalidInput(f"group.scope must be one of {', '.join(SCOPES)}",
                               field="group.scope")
        if self.max_per_host is not None and int(self.max_per_host) < 1:
            raise InvalidInput("group.max_per_host must be at least 1",
                               field="group.max_per_host")
        caps.parse_requirements(self.capabilities)  # fail early on bad syntax

    @property
    def placement_policy(self) -> str | None:
        """The one affinity-like policy of the group, if any."""
        return next((p for p in self.policies if p in PLACEMENT_POLICIES), None)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupSpec:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})

    @classmethod
    def from_row(cls, group: Any, exclude_instances: Sequence[str] = ()) -> GroupSpec:
        """Build from a ``persistence.models.ServerGroup`` (duck-typed, no import).

        Members without a host yet, and the ``exclude_instances`` (the ones
        being scheduled now, e.g. an evacuated instance), are left out.
        """
        skip = set(exclude_instances)
        return cls(id=group.id, policies=list(group.policies or []), scope=group.scope or "host",
                   max_per_host=group.max_per_host, capabilities=dict(group.capabilities or {}),
                   member_hosts=[m.host for m in group.members
                                 if m.host and m.instance_id not in skip])


@dataclasses.dataclass
class RequestSpec:
    """N identical instances to place together: one view, one pass.

    Give ``count`` (exactly N) or ``min_count``/``max_count``; ``resources``
    per instance by resource class; ``capabilities`` in the syntax of
    :mod:`fleetflow.scheduler.capabilities`; ``instance_uuids`` (or names)
    key the result, one per instance up to ``max_count``; ``volume_gb``: each
    instance's host must reach a storage backend with that much free.
    """

    resources: dict[str, int] = dataclasses.field(default_factory=dict)
    count: int | None = None
    min_count: int | None = None
    max_count: int | None = None
    capabilities: dict[str, Any] = dataclasses.field(default_factory=dict)
    required_traits: list[str] = dataclasses.field(default_factory=list)
    forbidden_traits: list[str] = dataclasses.field(default_factory=list)
    region: str | None = None
    zone: str | None = None
    group: GroupSpec | None = None
    excluded_hosts: list[str] = dataclasses.field(default_factory=list)
    instance_uuids: list[str] = dataclasses.field(default_factory=list)
    instance_names: list[str] = dataclasses.field(default_factory=list)
    # GB of the data volume each instance gets on a backend its host reaches.
    volume_gb: int | None = None

    def __post_init__(self) -> None:
        if self.volume_gb is not None:
            self.volume_gb = int(self.volume_gb)
            if self.volume_gb < 1:
                raise InvalidInput("volume_gb must be at least 1", field="volume_gb")
        if isinstance(self.group, Mapping):
            self.group = GroupSpec.from_dict(self.group)
        if self.count is not None:
            if self.min_count is not None or self.max_count is not None:
                raise InvalidInput("give count or min_count/max_count, not both", field="count")
            self.min_count = self.max_count = int(self.count)
        if self.min_count is None and self.max_count is None:
            self.min_count = self.max_count = 1
        self.max_count = int(self.max_count if self.max_count is not None else self.min_count)
        self.min_count = int(self.min_count if self.min_count is not None else self.max_count)
        self.count = None  # min/max now carry it; keeps to_dict round trips stable
        if self.min_count < 1 or self.max_count < self.min_count:
            raise InvalidInput("need 1 <= min_count <= max_count", field="min_count")
        for rc, amount in self.resources.items():
            if rc not in RESOURCE_CLASSES or int(amount) < 0:
                raise InvalidInput(f"resources.{rc}: unknown class or negative amount",
                                   field=f"resources.{rc}")
        self.resources = {rc: int(n) for rc, n in self.resources.items() if int(n) > 0}
        for ids, name in ((self.instance_uuids, "instance_uuids"),
                          (self.instance_names, "instance_names")):
            if ids and len(ids) < self.max_count:
                raise InvalidInput(f"{name}: {len(ids)} given for max_count {self.max_count}",
                                   field=name)
        both = set(self.required_traits) & set(self.forbidden_traits)
        if both:
            raise InvalidInput(f"trait {sorted(both)[0]} is both required and forbidden",
                               field="traits")
        caps.parse_requirements(self.capabilities)  # fail early on bad syntax

    @classmethod
    def for_flavor(cls, flavor: Any, capabilities: Mapping[str, Any] | None = None,
                   **fields: Any) -> RequestSpec:
        """A spec from a ``persistence.models.Flavor`` (duck-typed) plus request fields.

        The flavor's extra specs are capability requirements, except scoped
        keys such as ``resources:GPU`` (a resource amount, already in
        ``flavor.resources``); the request's own ``capabilities`` win over them.
        """
        wanted = {k: v for k, v in (flavor.extra_specs or {}).items() if ":" not in k}
        wanted.update(capabilities or {})
        return cls(resources=dict(flavor.resources), capabilities=wanted, **fields)

    def instance_key(self, index: int) -> str:
        """The id an instance's result is keyed by: uuid, else name, else its index."""
        if self.instance_uuids:
            return self.instance_uuids[index]
        if self.instance_names:
            return self.instance_names[index]
        return str(index)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("count")
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestSpec:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        if values.get("group") is not None:
            values["group"] = GroupSpec.from_dict(values["group"])
        return cls(**values)
