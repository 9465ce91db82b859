"""Place every server of an evacuation in one pass over one view of the cloud.

An evacuation moves servers of many flavors at once, off hosts that are
going away. Placing them one request at a time would let each see a stale
cloud, or force a re-read per server; here they are placed together, each
one seeing the servers placed before it (usage and group members), on the
one snapshot the caller read.

- Destinations: ``up`` hosts only, never a host being evacuated (a source of
  any server of the pass), never an ``excluded_hosts`` one, and only
  ``target_hosts`` when given; then per server its capabilities, its group's
  ``host-capabilities``, the hosts that reach every volume backend it keeps,
  and free resources as the pass fills hosts up.
- Larger servers (and affinity units) go first so a fleet filled by small
  ones does not leave them nowhere to go.
- ``spread`` sends each server to the host with the most room left
  (``weighers``: dominant share over every resource class of the pass).
- Anti-affinity keeps its per-domain limit, counting members that stay.
  Hard affinity (``affinity``, ``network-proximity``) moves the group's
  servers of the pass as one unit into one domain of the rule's finest
  scope, next to members that stay; if no domain takes them all, none of
  them is placed. Soft policies do not filter.

The snapshot is not changed: usage of the pass is kept in a private overlay.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import capabilities as caps
from fleetflow.scheduler.filters import FilterStep
from fleetflow.scheduler.moves.explain import domain_text, explain_server, explain_unit
from fleetflow.scheduler.moves.passes import Eligibility, MovePass
from fleetflow.scheduler.moves.units import (
    allowed_domains,
    place_unit,
    unit_alternates,
    unit_scope,
)
from fleetflow.scheduler.policies import GroupRule
from fleetflow.scheduler.snapshot import CloudSnapshot, HostState
from fleetflow.scheduler.spec import HOST_CAPABILITIES, GroupSpec
from fleetflow.scheduler.weighers import SPREAD


@dataclasses.dataclass
class ServerToMove:
    """One server to place off its ``source`` host.

    ``resources`` are its flavor's; ``capabilities`` the requirements its
    flavor and request demand (:mod:`fleetflow.scheduler.capabilities`);
    ``group.member_hosts`` the hosts of the members that are not moved in
    this pass; ``backends_needed`` one list per volume that must stay
    attached, of the hosts that reach that volume's backend.
    """

    key: str
    source: str
    resources: dict[str, int]
    capabilities: dict[str, Any] = dataclasses.field(default_factory=dict)
    group: GroupSpec | None = None
    backends_needed: list[list[str]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.group, Mapping):
            self.group = GroupSpec.from_dict(self.group)
        for rc, amount in self.resources.items():
            if int(amount) < 0:
                raise InvalidInput(f"server {self.key}: resources.{rc} is negative",
                                   field=f"resources.{rc}")
        self.resources = {rc: int(n) for rc, n in self.resources.items() if int(n) > 0}
        self.backends_needed = [list(hosts) for hosts in self.backends_needed]
        caps.parse_requirements(self.capabilities)  # fail early on bad syntax

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerToMove:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


@dataclasses.dataclass
class MovePlacement:
    """The answer of one pass, JSON-safe through ``to_dict``/``from_dict``.

    ``candidates``: server key -> [primary, alternates...] for the servers
    placed, best first (the order a retry walks them); ``unplaced``: server
    key -> why no host was found, naming the filter or group rule;
    ``host_uuids``: every host named in ``candidates`` -> its provider uuid.
    """

    candidates: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    unplaced: dict[str, str] = dataclasses.field(default_factory=dict)
    host_uuids: dict[str, str] = dataclasses.field(default_factory=dict)

    def host_of(self, key: str) -> str | None:
        """The primary destination of a server, None when it was not placed."""
        hosts = self.candidates.get(key)
        return hosts[0] if hosts else None

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": {k: list(v) for k, v in self.candidates.items()},
                "unplaced": dict(self.unplaced), "host_uuids": dict(self.host_uuids)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MovePlacement:
        return cls(candidates={k: list(v) for k, v in data.get("candidates", {}).items()},
                   unplaced=dict(data.get("unplaced", {})),
                   host_uuids=dict(data.get("host_uuids", {})))


def place_moves(servers: Sequence[ServerToMove], snapshot: CloudSnapshot, *,
                excluded_hosts: Iterable[str] = (), target_hosts: Iterable[str] | None = None,
                alternates: int = 2, weigher: str = SPREAD) -> MovePlacement:
    """Place every server it can; the others are in ``unplaced`` with the reason.

    ``excluded_hosts`` and ``target_hosts`` take host names or uuids; no
    ``target_hosts`` (None or empty) means any host. The result is the same
    for the same input, whatever the order of ``servers`` (ties go to the
    host first by name).
    """
    servers = list(servers)
    keys = [s.key for s in servers]
    if len(set(keys)) != len(keys):
        raise InvalidInput("servers: every server key must be unique", field="servers")
    hosts = snapshot.hosts
    destinations, steps = _destinations(hosts, servers, excluded_hosts, target_hosts)
    classes = sorted({rc for s in servers for rc in s.resources})
    run = MovePass(snapshot, destinations, classes, weigher)
    eligibility_of = _eligibilities(servers, hosts, destinations)
    for server in servers:
        eligibility_of[server.key].admit(server.resources)
    for eligibility in dict.fromkeys(eligibility_of.values()):
        run.register(eligibility)
    rules, rule_of = _rules(servers, snapshot)

    primaries: dict[str, int] = {}
    unplaced: dict[str, str] = {}
    failed: list[ServerToMove] = []
    measure = size_measure(hosts, destinations, classes)
    for item in _items(servers, rule_of, measure):
        if isinstance(item, ServerToMove):
            rule = _limiting(rule_of.get(item.key))
            position = run.place_one(item.resources, eligibility_of[item.key], rule)
            if position is None:
                failed.append(item)
                continue
            primaries[item.key] = position
            if item.key in rule_of:
                rule_of[item.key].record(hosts[position])
            continue
        group_id, members = item
        rule = rules[group_id]
        placed, reason = _place_unit(run, rule, members, eligibility_of, steps)
        if placed is None:
            unplaced.update((m.key, reason) for m in members)
            continue
        for member, position in zip(members, placed, strict=True):
            run.consume(position, member.resources)
            rule.record(hosts[position])
            primaries[member.key] = position
    # Usage and member counts only grow, so a server that found no host finds
    # none at the end of the pass either; explained then, servers alike share
    # one explanation instead of a fleet scan each.
    explained: dict[tuple, str] = {}
    fitting: dict[tuple, list[int]] = {}
    for server in failed:
        rule = _limiting(rule_of.get(server.key))
        eligibility = eligibility_of[server.key]
        cache = (id(eligibility), tuple(sorted(server.resources.items())), id(rule))
        if cache not in explained:
            explained[cache] = explain_server(run, steps, eligibility, server.resources,
                                               rule, _group_name(server), fitting)
        unplaced[server.key] = explained[cache]

    # Alternates in placement order, not input order: the rotation over
    # shared candidates then does not depend on how the caller listed servers.
    by_key = {s.key: s for s in servers}
    chosen: dict[str, list[int]] = {}
    for key, position in primaries.items():
        server, rule = by_key[key], rule_of.get(key)
        eligibility = eligibility_of[key]
        if rule is not None and rule.affinity:
            others = unit_alternates(run, position, server.resources, eligibility, rule,
                                     unit_scope(rule)[1], alternates)
        else:
            others = run.alternates(position, server.resources, eligibility, rule, alternates)
        chosen[key] = [position, *others]
    candidates = {s.key: [hosts[p].name for p in chosen[s.key]]
                  for s in servers if s.key in chosen}
    named = sorted({name for names in candidates.values() for name in names})
    return MovePlacement(candidates=candidates,
                         unplaced={s.key: unplaced[s.key] for s in servers if s.key in unplaced},
                         host_uuids={name: snapshot.by_name[name].uuid for name in named})


# -- building the pass -------------------------------------------------------------------


def _destinations(hosts: Sequence[HostState], servers: Sequence[ServerToMove],
                  excluded_hosts: Iterable[str], target_hosts: Iterable[str] | None
                  ) -> tuple[list[int], list[FilterStep]]:
    """Positions of the hosts any server may go to, and the steps that chose them."""
    steps: list[FilterStep] = []
    survivors = list(range(len(hosts)))

    def keep(name: str, test) -> None:
        nonlocal survivors
        before = len(survivors)
        survivors = [p for p in survivors if test(hosts[p])]
        steps.append(FilterStep(name, before, len(survivors)))

    # Down hosts are fenced and maintenance or disabled ones are being drained;
    # a host another evacuation holds is being emptied.
    keep("state", lambda h: h.takes_new_servers)
    # A host being evacuated may still read ``up`` (drain sets it later).
    sources = frozenset(s.source for s in servers)
    keep("source-hosts", lambda h: h.name not in sources)
    excluded = frozenset(excluded_hosts)
    if excluded:
        keep("excluded-hosts", lambda h: h.name not in excluded and h.uuid not in excluded)
    targets = frozenset(target_hosts or ())
    if targets:
        keep("target_hosts", lambda h: h.name in targets or (h.uuid and h.uuid in targets))
    return survivors, steps


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _eligibilities(servers: Sequence[ServerToMove], hosts: Sequence[HostState],
                   destinations: Sequence[int]) -> dict[str, Eligibility]:
    """One :class:`Eligibility` per distinct set of static requirements, by server key.

    An evacuation holds a handful of flavors and backends, so filtering per
    distinct set rather than per server keeps this near one fleet scan.
    """
    by_requirements: dict[tuple, Eligibility] = {}
    result = {}
    for server in servers:
        group = server.group
        group_caps = (group.capabilities if group is not None
                      and HOST_CAPABILITIES in group.policies else {})
        backends = frozenset(frozenset(b) for b in server.backends_needed)
        signature = (canonical(server.capabilities), canonical(group_caps), backends)
        eligibility = by_requirements.get(signature)
        if eligibility is None:
            eligibility = by_requirements[signature] = _eligibility(
                hosts, destinations, server.capabilities, group_caps, backends)
        result[server.key] = eligibility
    return result


def _eligibility(hosts: Sequence[HostState], destinations: Sequence[int],
                 capabilities: Mapping[str, Any], group_caps: Mapping[str, Any],
                 backends: frozenset[frozenset[str]]) -> Eligibility:
    steps: list[FilterStep] = []
    survivors = list(destinations)
    if backends:
        # The destination must reach every backend: only hosts in all the lists.
        # First, as it is usually the most selective and is a set lookup.
        reach = frozenset.intersection(*backends)
        before = len(survivors)
        survivors = [p for p in survivors if hosts[p].name in reach]
        steps.append(FilterStep("backends", before, len(survivors)))
    for name, requirements in (("capabilities", capabilities),
                               ("host-capabilities", group_caps)):
        parsed = caps.parse_requirements(requirements)
        if parsed:
            matches = caps.host_matcher(parsed)
            before = len(survivors)
            survivors = [p for p in survivors if matches(hosts[p].capabilities)]
            steps.append(FilterStep(name, before, len(survivors)))
    return Eligibility(survivors, steps)


def _rules(servers: Sequence[ServerToMove], snapshot: CloudSnapshot
           ) -> tuple[dict[Any, GroupRule], dict[str, GroupRule]]:
    """One rule per group (by id; the first server's spec of a group describes it)."""
    rules: dict[Any, GroupRule] = {}
    rule_of: dict[str, GroupRule] = {}
    for server in servers:
        group = server.group
        if group is None:
            continue
        group_id = _group_id(server)
        if group_id not in rules:
            rules[group_id] = GroupRule(group, snapshot)
        rule_of[server.key] = rules[group_id]
    return rules, rule_of


def _limiting(rule: GroupRule | None) -> GroupRule | None:
    """The rule when it limits where a single server may go (anti-affinity)."""
    return rule if rule is not None and rule.limit is not None else None


def _group_name(server: ServerToMove) -> str:
    return server.group.id if server.group and server.group.id else "(unnamed)"


def _group_id(server: ServerToMove) -> Any:
    # A group without an id is known only by its spec object.
    return server.group.id if server.group.id is not None else ("spec", id(server.group))


def size_measure(hosts: Sequence[HostState], destinations: Sequence[int], classes: Sequence[str]):
    """Size of resources as their largest share of the destinations' total capacity."""
    totals = {rc: sum(hosts[p].capacity.get(rc, 0) for p in destinations) for rc in classes}

    def measure(resources: Mapping[str, int]) -> float:
        share = 0.0
        for rc, amount in resources.items():
            total = totals.get(rc, 0)
            fraction = amount / total if total else float("inf")
            if fraction > share:
                share = fraction
        return share
    return measure


def _items(servers: Sequence[ServerToMove], rule_of: Mapping[str, GroupRule], measure):
    """Single servers and affinity units (group id, members), largest first."""
    units: dict[Any, list[ServerToMove]] = {}
    items: list[tuple[float, str, Any]] = []
    for server in servers:
        rule = rule_of.get(server.key)
        if rule is not None and rule.affinity:
            units.setdefault(_group_id(server), []).append(server)
        else:
            items.append((measure(server.resources), server.key, server))
    for group_id, members in units.items():
        members.sort(key=lambda s: (-measure(s.resources), s.key))
        total = sum_resources(m.resources for m in members)
        items.append((measure(total), min(m.key for m in members), (group_id, members)))
    items.sort(key=lambda item: (-item[0], item[1]))
    return [item for _, _, item in items]


def sum_resources(resources: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in resources:
        for rc, amount in one.items():
            total[rc] = total.get(rc, 0) + amount
    return total


# -- affinity units ----------------------------------------------------------------------


def _place_unit(run: MovePass, rule: GroupRule, members: Sequence[ServerToMove],
                eligibility_of: Mapping[str, Eligibility], steps: Sequence[FilterStep]
                ) -> tuple[list[int] | None, str]:
    name, scope = unit_scope(rule)
    domains = allowed_domains(run, rule, scope)
    placed, roomy = place_unit(run, [(m.resources, eligibility_of[m.key]) for m in members],
                               rule, scope, domains)
    if placed is not None:
        return placed, ""
    staying = None
    if domains is not None:
        staying = sorted({domain_text(d) for n, _ in rule.affinity
                          for d in rule.member_domains[n]})
    return None, explain_unit(_group_name(members[0]), name, scope,
                              [m.resources for m in members], staying, len(domains or ()),
                              roomy,
                              [*steps, *eligibility_of[members[0].key].steps])
