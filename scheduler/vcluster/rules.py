"""A virtual cluster's groupings checked and turned into what the placer needs.

Affinity units are the members tied together by affinity groupings and
attachments; they are placed as one. Inside a unit, servers of a host-scope
server affinity share one host (a *host set*), volumes of an affinity share
one backend (a *backend set*). Which members are forced into one domain of a
scope follows from the unit's edges: a backend is reachable from one rack
only, so a server and a volume tied by affinity always share a rack.
Anti-affinity becomes per-domain limits (:class:`AntiRule`); one between
two members forced into the same domain is a contradiction.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler.spec import AFFINITY, ANTI_AFFINITY

if TYPE_CHECKING:
    from fleetflow.scheduler.vcluster.place import Grouping, ServerMember, VolumeMember

RULES = (AFFINITY, ANTI_AFFINITY)
SCOPES = ("host", "backend", "rack", "zone")
# Scopes an anti-affinity may take per kind of pair, the default first.
SERVER_SCOPES = ("host", "rack", "zone")
VOLUME_SCOPES = ("rack", "backend", "zone")
MIXED_SCOPES = ("rack", "host", "zone")


# scope -> (what ties members, the members it ties) for each affinity of that scope
Ties = dict[str, list[tuple[str, list[str]]]]


class UnionFind:
    def __init__(self, items: Iterable[str] = ()):
        self.parent: dict[str, str] = {item: item for item in items}

    def find(self, item: str) -> str:
        parent = self.parent
        root = item
        while parent[root] != root:
            root = parent[root]
        while parent[item] != root:
            parent[item], item = root, parent[item]
        return root

    def union(self, items: Sequence[str]) -> None:
        if len(items) < 2:
            return
        # The smallest name as the root keeps roots (and orders built on them) stable.
        roots = sorted({self.find(i) for i in items})
        for other in roots[1:]:
            self.parent[other] = roots[0]

    def groups(self) -> dict[str, list[str]]:
        """Root -> members, both by name: the same sets whatever the input order."""
        found: dict[str, list[str]] = {}
        for item in sorted(self.parent):
            found.setdefault(self.find(item), []).append(item)
        return dict(sorted(found.items()))


@dataclasses.dataclass
class AntiRule:
    """One anti-affinity grouping as limits, with its member counts during a pass.

    ``ss``/``vv``/``sv`` are the scopes of its server-server, volume-volume
    and server-volume pairs, None when it has no such pair. Counts are by
    domain: at most one server per ``ss`` domain and one volume per ``vv``
    domain; a volume's ``sv`` domain never holds a member server.
    """

    name: str
    servers: frozenset[str]
    volumes: frozenset[str]
    ss: str | None
    vv: str | None
    sv: str | None
    server_counts: Counter = dataclasses.field(default_factory=Counter)
    volume_counts: Counter = dataclasses.field(default_factory=Counter)
    server_near: Counter = dataclasses.field(default_factory=Counter)
    volume_near: Counter = dataclasses.field(default_factory=Counter)


@dataclasses.dataclass
class Rules:
    servers: dict[str, ServerMember]
    volumes: dict[str, VolumeMember]
    groupings: list[Grouping]
    attachments: dict[str, str]  # volume -> server
    anti: list[AntiRule]
    anti_of: dict[str, list[AntiRule]]
    host_sets: dict[str, list[str]]  # root -> servers sharing one host
    host_set_of: dict[str, str]
    backend_sets: dict[str, list[str]]  # root -> volumes sharing one backend
    backend_set_of: dict[str, str]
    links: dict[str, list[str]]  # backend set -> host sets whose hosts must reach it
    units: list[tuple[list[str], list[str]]]  # (host sets, backend sets)
    rack_of: UnionFind  # members forced into one rack
    zone_of: UnionFind  # members forced into one zone
    # server -> scopes of its server affinities with other servers (for alternates)
    server_affinity_scopes: dict[str, set[str]]


def _bad(message: str, field: str = "groupings") -> InvalidInput:
    return InvalidInput(message, field=field)


def analyse(servers: Sequence[ServerMember], volumes: Sequence[VolumeMember],
            groupings: Sequence[Grouping]) -> Rules:
    """Check the cluster (InvalidInput naming the problem) and build its :class:`Rules`."""
    by_server = {s.name: s for s in servers}
    by_volume = {v.name: v for v in volumes}
    seen: set[str] = set()
    for member in [*servers, *volumes]:
        if member.name in seen:
            raise _bad(f"instances: duplicate member name {member.name!r}", "instances")
        seen.add(member.name)
    attachments: dict[str, str] = {}
    for volume in volumes:
        target = volume.attach_to
        if target is None:
            continue
        if target in by_volume:
            raise _bad(f"volume {volume.name}: attach_to {target!r} is a volume, not a server",
                       "instances")
        if target not in by_server:
            raise _bad(f"volume {volume.name}: attach_to {target!r} names no server",
                       "instances")
        attachments[volume.name] = target
    names: set[str] = set()
    for grouping in groupings:
        _check_grouping(grouping, by_server, by_volume, names)
    for grouping in groupings:
        members = grouping.members
        if grouping.rule == AFFINITY and len(members) == 2:
            server = next((m for m in members if m in by_server), None)
            volume = next((m for m in members if m in by_volume), None)
            if server is not None and volume is not None:
                if attachments.get(volume, server) != server:
                    raise _bad(f"grouping {grouping.name}: volume {volume} would be attached "
                               f"to {server} and to {attachments[volume]}")
                attachments[volume] = server
    return _build(by_server, by_volume, list(groupings), attachments)


def _check_grouping(grouping: Grouping, by_server: dict, by_volume: dict,
                    names: set[str]) -> None:
    name = grouping.name
    if name in names:
        raise _bad(f"grouping {name}: duplicate grouping name")
    names.add(name)
    if grouping.rule not in RULES:
        raise _bad(f"grouping {name}: unknown rule {grouping.rule!r}; "
                   f"expected one of {', '.join(RULES)}")
    if grouping.scope is not None and grouping.scope not in SCOPES:
        raise _bad(f"grouping {name}: unknown scope {grouping.scope!r}; "
                   f"expected one of {', '.join(SCOPES)}")
    if len(set(grouping.members)) != len(grouping.members):
        raise _bad(f"grouping {name}: a member is listed twice")
    for member in grouping.members:
        if member not in by_server and member not in by_volume:
            raise _bad(f"grouping {name}: unknown member {member!r}")
    count_s = sum(1 for m in grouping.members if m in by_server)
    count_v = len(grouping.members) - count_s
    scope = grouping.scope
    if scope is None:
        return
    allowed: list[tuple[bool, tuple[str, ...], str]] = [(count_s > 1, SERVER_SCOPES, "servers")]
    if grouping.rule == ANTI_AFFINITY:
        allowed += [(count_v > 1, VOLUME_SCOPES, "volumes"),
                    (count_s > 0 and count_v > 0, MIXED_SCOPES, "a server and a volume")]
    for present, scopes, what in allowed:
        if present and scope not in scopes:
            raise _bad(f"grouping {name}: scope {scope!r} does not apply to {what}; "
                       f"expected one of {', '.join(scopes)}")


def pair_scopes(grouping: Grouping, servers: Sequence[str], volumes: Sequence[str]
                ) -> tuple[str | None, str | None, str | None]:
    """(server-server, volume-volume, server-volume) scopes; None when no such pair."""
    scope = grouping.scope
    ss = (scope or "host") if len(servers) > 1 else None
    if grouping.rule == AFFINITY:
        # Volumes of an affinity share a backend; a server reaches its volumes.
        return ss, ("backend" if len(volumes) > 1 else None), None
    vv = (scope or "rack") if len(volumes) > 1 else None
    sv = (scope or "rack") if servers and volumes else None
    return ss, vv, sv


def _build(by_server: dict, by_volume: dict, groupings: list[Grouping],
           attachments: dict[str, str]) -> Rules:
    every = [*by_server, *by_volume]
    unit, rack, zone = UnionFind(every), UnionFind(every), UnionFind(every)
    host_uf, backend_uf = UnionFind(by_server), UnionFind(by_volume)
    linked: list[tuple[str, str]] = list(attachments.items())
    affinity_scopes: dict[str, set[str]] = {}
    split = {}
    # What forced members into one domain, by scope: a contradiction names it.
    ties: Ties = {scope: [] for scope in SCOPES}
    for grouping in groupings:
        servers = [m for m in grouping.members if m in by_server]
        volumes = [m for m in grouping.members if m in by_volume]
        split[grouping.name] = (servers, volumes)
        if grouping.rule != AFFINITY:
            continue
        ss, _, _ = pair_scopes(grouping, servers, volumes)
        tie = f"grouping {grouping.name}"
        unit.union(grouping.members)
        zone.union(grouping.members)
        ties["zone"].append((tie, grouping.members))
        backend_uf.union(volumes)
        ties["backend"].append((tie, volumes))
        if ss == "host":
            host_uf.union(servers)
            ties["host"].append((tie, servers))
        if ss is not None:
            for server in servers:
                affinity_scopes.setdefault(server, set()).add(ss)
        if volumes or ss in ("host", "rack"):
            rack.union(grouping.members)
            ties["rack"].append((tie, grouping.members))
        linked += [(v, s) for v in volumes for s in servers]
    for volume, server in attachments.items():
        for uf in (unit, rack, zone):
            uf.union([volume, server])
        for scope in ("rack", "zone"):
            ties[scope].append((f"volume {volume} attached to {server}", [volume, server]))

    host_sets = host_uf.groups()
    host_set_of = {s: root for root, members in host_sets.items() for s in members}
    backend_sets = backend_uf.groups()
    backend_set_of = {v: root for root, members in backend_sets.items() for v in members}
    links: dict[str, list[str]] = {root: [] for root in backend_sets}
    for volume, server in linked:
        found = links[backend_set_of[volume]]
        if host_set_of[server] not in found:
            found.append(host_set_of[server])
    for found in links.values():
        found.sort()
    units: dict[str, tuple[list[str], list[str]]] = {}
    for root in host_sets:
        units.setdefault(unit.find(root), ([], []))[0].append(root)
    for root in backend_sets:
        units.setdefault(unit.find(root), ([], []))[1].append(root)

    anti: list[AntiRule] = []
    anti_of: dict[str, list[AntiRule]] = {}
    for grouping in groupings:
        if grouping.rule != ANTI_AFFINITY:
            continue
        servers, volumes = split[grouping.name]
        ss, vv, sv = pair_scopes(grouping, servers, volumes)
        _contradictions(grouping, servers, volumes, (ss, vv, sv), host_uf, backend_uf, rack,
                        zone, ties)
        rule = AntiRule(grouping.name, frozenset(servers), frozenset(volumes), ss, vv, sv)
        anti.append(rule)
        for member in grouping.members:
            anti_of.setdefault(member, []).append(rule)
    return Rules(servers=by_server, volumes=by_volume, groupings=groupings,
                 attachments=attachments, anti=anti, anti_of=anti_of, host_sets=host_sets,
                 host_set_of=host_set_of, backend_sets=backend_sets,
                 backend_set_of=backend_set_of, links=links,
                 units=[units[root] for root in sorted(units)], rack_of=rack, zone_of=zone,
                 server_affinity_scopes=affinity_scopes)


def _tied_by(ties: list[tuple[str, list[str]]], first: str, last: str) -> list[str]:
    """The ties (``grouping g``, an attachment) that chain ``first`` to ``last``: the
    shortest chain, so the message names the groupings that contradict and no other."""
    came_from: dict[str, tuple[str, str] | None] = {first: None}
    pending = [first]
    while pending and last not in came_from:
        following = []
        for member in pending:
            for tie, members in ties:
                if member not in members:
                    continue
                for other in members:
                    if other not in came_from:
                        came_from[other] = (member, tie)
                        following.append(other)
        pending = following
    chain, member = [], last
    while came_from.get(member) is not None:
        member, tie = came_from[member]
        if tie not in chain:
            chain.append(tie)
    return chain[::-1]


def _contradictions(grouping: Grouping, servers: list[str], volumes: list[str],
                    scopes: tuple[str | None, str | None, str | None], host_uf: UnionFind,
                    backend_uf: UnionFind, rack: UnionFind, zone: UnionFind,
                    ties: Ties) -> None:
    """Two members the affinities force into one domain the anti-affinity forbids; the
    message names both sides: the anti-affinity and the affinities that force them."""
    ss, vv, sv = scopes
    forced = {"host": host_uf, "backend": backend_uf, "rack": rack, "zone": zone}

    def clash(members: list[str], scope: str) -> tuple[str, str] | None:
        first: dict[str, str] = {}
        for member in members:
            root = forced[scope].find(member)
            if root in first:
                return first[root], member
            first[root] = member
        return None

    found, scope = None, None
    if ss is not None:
        found, scope = clash(servers, ss), ss
    if found is None and vv is not None:
        found, scope = clash(volumes, vv), vv
    if found is None and sv in ("rack", "zone"):
        # A volume never has to be on its server's own disk, so host scope cannot clash.
        roots = {forced[sv].find(s): s for s in reversed(servers)}
        for volume in volumes:
            root = forced[sv].find(volume)
            if root in roots:
                found, scope = (roots[root], volume), sv
                break
    if found is not None:
        forcing = ", ".join(_tied_by(ties[scope], *found))
        raise _bad(f"grouping {grouping.name} (anti-affinity, {scope}): {found[0]} and "
                   f"{found[1]} must share a {scope} by affinity ({forcing})")
