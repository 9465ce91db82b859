"""Properties of place_vcluster over random small clouds and clusters.

Clouds: a few regions, zones and racks; hosts with VCPU and MEMORY_MB
inventories (reserved, allocation ratio), some usage, some down; backends
shared by a rack or local to a host, with capacity, usage and volume types.
Clusters: servers, volumes (sizes, types, attach_to) and groupings of every
rule and scope over servers, volumes or both, contradictory ones included.

Every answer that fits is checked from scratch against the rules of the
table in ``scheduler/vcluster/place.py``; alternates are checked by moving one
member alone. A contradiction that ``analyse`` reports ("... must share a
rack by affinity") is checked to be real by an exhaustive search over
abstract placements. Then an update: the placed cluster is pinned where it
is (its usage now in the snapshot), new members and groupings over old and
new are added, and any answer that fits keeps every grouping with the
pinned members where they were.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import CloudSnapshot, HostState
from fleetflow.scheduler.vcluster.place import (
    BackendState,
    Grouping,
    ServerMember,
    VolumeMember,
    check_groupings,
    place_vcluster,
)

# CI runs the same 150 examples each time; VCLUSTER_PROPERTY_EXAMPLES=5000 soaks
# with new random examples instead.
SOAK = int(os.environ.get("VCLUSTER_PROPERTY_EXAMPLES", "0"))
SETTINGS = settings(max_examples=SOAK or 150, deadline=None, derandomize=not SOAK, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
TYPES = ("ssd", "hdd")
# Scopes a grouping of each kind of members usually gets; any scope now and then.
SCOPES_OF = {"ss": [None, "host", "rack", "zone"], "vv": [None, "rack", "backend", "zone"],
             "sv": [None, "rack", "host", "zone"], "mixed": [None, "rack", "zone", "host"]}
ANY_SCOPE = [None, "host", "backend", "rack", "zone"]


# -- the rules, checked from scratch ------------------------------------------------------


def expected_attachments(servers, volumes, groupings) -> dict[str, str]:
    kinds = {s.name: "s" for s in servers} | {v.name: "v" for v in volumes}
    found = {v.name: v.attach_to for v in volumes if v.attach_to}
    for g in groupings:
        if g.rule == "affinity" and len(g.members) == 2 and {kinds[m] for m in g.members} == {
                "s", "v"}:
            s, v = sorted(g.members, key=lambda m: kinds[m])
            found[v] = s
    return found


def broken_rules(kinds: dict[str, str], groupings, attachments: dict[str, str],
                 where: Callable, reaches: Callable, backend_id: Callable) -> list[str]:
    """Every pair a grouping or attachment does not hold, per the module docstring table.

    ``where(member, scope)``: its domain (a volume's host: its disk's host or None);
    ``reaches(server, volume)``; ``backend_id(volume)``.
    """
    broken = []
    for v, s in attachments.items():
        if not reaches(s, v):
            broken.append(f"attachment {v} -> {s}")
    for g in groupings:
        for i, a in enumerate(g.members):
            for b in g.members[i + 1:]:
                pair = "".join(sorted(kinds[a] + kinds[b]))
                if g.rule == "affinity":
                    if pair == "ss":
                        ok = where(a, g.scope or "host") == where(b, g.scope or "host")
                    elif pair == "vv":
                        ok = backend_id(a) == backend_id(b)
                    else:
                        s, v = (a, b) if kinds[a] == "s" else (b, a)
                        ok = reaches(s, v)
                else:
                    scope = g.scope or {"ss": "host", "vv": "rack", "sv": "rack"}[pair]
                    if pair == "vv" and scope == "backend":
                        ok = backend_id(a) != backend_id(b)
                    else:
                        ok = where(a, scope) != where(b, scope)
                        ok = ok and (pair != "vv" or backend_id(a) != backend_id(b))
                if not ok:
                    broken.append(f"{g.name} ({g.rule}, {g.scope}): {a} {b}")
    return broken


def real_placement(snapshot, backends, host_of, backend_of):
    by_backend = {b.name: b for b in backends}

    def where(member, scope):
        if member in host_of:
            return snapshot.by_name[host_of[member]].domain(scope)
        return by_backend[backend_of[member]].domain(scope)

    def reaches(server, volume):
        backend, h = by_backend[backend_of[volume]], snapshot.by_name[host_of[server]]
        if backend.scope == "host":
            return backend.host_name == h.name
        return backend.domain("rack") == h.domain("rack")

    return where, reaches, lambda volume: backend_of[volume]


def usable(inventory) -> int:
    """Placement's capacity: (total - reserved) * allocation_ratio, rounded down."""
    return int((inventory["total"] - inventory["reserved"]) * inventory["allocation_ratio"])


def assert_placement(servers, volumes, groupings, snapshot, backends, inventories, result,
                     alternates, pinned_hosts=None, pinned_backends=None):
    """The answer keeps every rule; pinned members stay put and are not counted again."""
    pinned_hosts, pinned_backends = pinned_hosts or {}, pinned_backends or {}
    by_backend = {b.name: b for b in backends}
    kinds = {s.name: "s" for s in servers} | {v.name: "v" for v in volumes}
    # Every member placed exactly once (one list each, no name twice in it).
    assert sorted(result.hosts) == sorted(s.name for s in servers)
    assert sorted(result.backends) == sorted(v.name for v in volumes)
    for candidates in [*result.hosts.values(), *result.backends.values()]:
        assert candidates and len(candidates) == len(set(candidates)) <= 1 + alternates
    host_of = {s: c[0] for s, c in result.hosts.items()}
    backend_of = {v: c[0] for v, c in result.backends.items()}
    for name, where in [*pinned_hosts.items(), *pinned_backends.items()]:
        got = result.hosts.get(name) or result.backends.get(name)
        assert got == [where], (name, got)
    attachments = expected_attachments(servers, volumes, groupings)
    assert result.attachments == attachments
    fresh_servers = [s for s in servers if s.name not in pinned_hosts]
    fresh_volumes = [v for v in volumes if v.name not in pinned_backends]

    def capacity_ok(host_of, backend_of):
        used = Counter()
        for s in fresh_servers:
            h = snapshot.by_name[host_of[s.name]]
            if h.state != "up" or any(h.capabilities.get(k) != w
                                      for k, w in s.capabilities.items()):
                return False
            for rc, n in s.resources.items():
                used[(h.name, rc)] += n
        for (name, rc), n in used.items():
            h = snapshot.by_name[name]
            if h.used.get(rc, 0) + n > usable(inventories[name][rc]):
                return False
        gb = Counter()
        for v in fresh_volumes:
            b = by_backend[backend_of[v.name]]
            if v.volume_type is not None and v.volume_type not in b.volume_types:
                return False
            gb[b.name] += v.size_gb
        return all(by_backend[name].used_gb + n <= by_backend[name].capacity_gb
                   for name, n in gb.items())

    def rules_ok(host_of, backend_of):
        where, reaches, backend_id = real_placement(snapshot, backends, host_of, backend_of)
        return broken_rules(kinds, groupings, attachments, where, reaches, backend_id)

    assert capacity_ok(host_of, backend_of)
    assert rules_ok(host_of, backend_of) == []
    # An alternate keeps every rule with every other member where it is.
    for name, candidates in result.hosts.items():
        assert name not in pinned_hosts or len(candidates) == 1
        for other in candidates[1:]:
            moved = {**host_of, name: other}
            assert capacity_ok(moved, backend_of), (name, other)
            assert rules_ok(moved, backend_of) == [], (name, other)
    for name, candidates in result.backends.items():
        assert name not in pinned_backends or len(candidates) == 1
        for other in candidates[1:]:
            moved = {**backend_of, name: other}
            assert capacity_ok(host_of, moved), (name, other)
            assert rules_ok(host_of, moved) == [], (name, other)


# -- is a contradiction real? every abstract placement, up to renaming --------------------


def solvable(servers, volumes, groupings) -> bool:
    """Does some cloud, as large as needed, hold every grouping (capacity aside)?

    Members are put one by one on hosts (servers) or backends (volumes) that
    are either already used or new, in a new or used rack and zone: every
    placement up to renaming of hosts, racks, zones and backends.
    """
    kinds = {s.name: "s" for s in servers} | {v.name: "v" for v in volumes}
    order = [s.name for s in servers] + [v.name for v in volumes]
    attachments = expected_attachments(servers, volumes, groupings)
    zone_of: list[int] = []  # rack -> zone
    rack_of: list[int] = []  # host -> rack
    backends: list[tuple] = []  # ("local", host) or ("shared", rack)
    at: dict[str, int] = {}  # member -> host or backend index

    def where(member, scope):
        if kinds[member] == "s":
            host = at[member]
            rack = rack_of[host]
        else:
            kind, place = backends[at[member]]
            host = place if kind == "local" else None
            rack = rack_of[place] if kind == "local" else place
        return {"host": host, "rack": rack, "zone": zone_of[rack], "backend": at[member]}[scope]

    def reaches(server, volume):
        kind, place = backends[at[volume]]
        host = at[server]
        return place == host if kind == "local" else place == rack_of[host]

    def holds() -> bool:
        placed = set(at)
        partial = [Grouping(g.name, [m for m in g.members if m in placed], g.rule, g.scope)
                   for g in groupings]
        links = {v: s for v, s in attachments.items() if v in placed and s in placed}
        return not broken_rules(kinds, partial, links, where, reaches, lambda v: at[v])

    def new_rack() -> list[int]:
        """Racks to use: each one used, and a new one in each zone and in a new zone."""
        return list(range(len(zone_of))) + [("new", z) for z in range(len(set(zone_of)) + 1)]

    def make_rack(choice) -> int:
        if isinstance(choice, tuple):
            zone_of.append(choice[1])
            return len(zone_of) - 1
        return choice

    def search(i: int) -> bool:
        if i == len(order):
            return True
        member = order[i]
        state = (len(zone_of), len(rack_of), len(backends))
        options: list[tuple] = []
        if kinds[member] == "s":
            options += [("host", h) for h in range(len(rack_of))]
            options += [("new host", r) for r in new_rack()]
        else:
            options += [("backend", b) for b in range(len(backends))]
            options += [("local", h) for h in range(len(rack_of))]
            options += [("local on new host", r) for r in new_rack()]
            options += [("shared", r) for r in new_rack()]
        for kind, choice in options:
            if kind == "host":
                at[member] = choice
            elif kind == "new host":
                rack_of.append(make_rack(choice))
                at[member] = len(rack_of) - 1
            elif kind == "backend":
                at[member] = choice
            else:
                if kind == "local on new host":
                    rack_of.append(make_rack(choice))
                    choice = len(rack_of) - 1
                place = make_rack(choice) if kind == "shared" else choice
                backends.append(("shared" if kind == "shared" else "local", place))
                at[member] = len(backends) - 1
            if holds() and search(i + 1):
                return True
            del at[member]
            del zone_of[state[0]:], rack_of[state[1]:], backends[state[2]:]
        return False

    return search(0)


# -- random clouds and clusters -------------------------------------------------------------


@st.composite
def clouds(draw, roomy=False):
    racks = []
    for g in range(draw(st.integers(1, 2))):
        for z in range(draw(st.integers(1, 2))):
            racks += [(f"g{g}", f"z{z}", f"r{r}") for r in range(draw(st.integers(1, 3)))]
    hosts, inventories = [], {}
    for i in range(draw(st.integers(2 if roomy else 0, 10))):
        region, zone, rack = draw(st.sampled_from(racks))
        inventory = {
            "VCPU": {"total": draw(st.integers(4 if roomy else 0, 8)),
                     "reserved": draw(st.integers(0, 1)),
                     "allocation_ratio": draw(st.sampled_from([1.0, 1.5, 4.0]))},
            "MEMORY_MB": {"total": draw(st.integers(4 if roomy else 0, 8)) * 1024,
                          "reserved": draw(st.sampled_from([0, 512])),
                          "allocation_ratio": draw(st.sampled_from([1.0, 1.5]))}}
        used = {rc: draw(st.integers(0, max(0, usable(record) // (2 if roomy else 1))))
                for rc, record in inventory.items()}
        hosts.append(HostState.from_dict({
            "name": f"h{i}", "region": region, "zone": zone, "rack": rack,
            "state": draw(st.sampled_from(["up"] * 5 + ["down", "maintenance"])),
            "inventory": inventory, "used": used,
            "capabilities": {"color": draw(st.sampled_from(["blue", "red"]))}}))
        inventories[f"h{i}"] = inventory
    backends = []
    for i in range(draw(st.integers(1 if roomy else 0, 8))):
        gb = draw(st.integers(20 if roomy else 0, 100))
        types = frozenset(draw(st.lists(st.sampled_from(TYPES), max_size=2)))
        if roomy:
            types = frozenset(TYPES)
        used = draw(st.integers(0, gb // (2 if roomy else 1)))
        if hosts and draw(st.booleans()):
            owner = draw(st.sampled_from(hosts))
            backends.append(BackendState(f"b{i}", scope="host", host_name=owner.name,
                                         region=owner.region, zone=owner.zone, rack=owner.rack,
                                         capacity_gb=gb, used_gb=used, volume_types=types))
        else:
            region, zone, rack = draw(st.sampled_from(racks))
            backends.append(BackendState(f"b{i}", region=region, zone=zone, rack=rack,
                                         capacity_gb=gb, used_gb=used, volume_types=types))
    return CloudSnapshot(hosts), backends, inventories


@st.composite
def groupings_over(draw, servers: list[str], volumes: list[str], prefix: str, count: int,
                   must: Sequence[Sequence[str]] = (), least: int = 1):
    """``least`` to ``count`` groupings of every kind, each with a member of each ``must``."""
    found = []
    for g in range(draw(st.integers(least, count))):
        kind = draw(st.sampled_from(["ss", "vv", "sv", "mixed", "mixed"]))
        pool_s = servers if kind in ("ss", "sv", "mixed") else []
        pool_v = volumes if kind in ("vv", "sv", "mixed") else []
        if kind == "sv":
            if not servers or not volumes:
                continue
            members = [draw(st.sampled_from(servers)), draw(st.sampled_from(volumes))]
        else:
            pool = pool_s + pool_v
            if not pool:
                continue
            members = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4,
                                    unique=True))
        for wanted in must:
            if wanted and not set(members) & set(wanted):
                members.append(draw(st.sampled_from(list(wanted))))
        rule = draw(st.sampled_from(["affinity", "anti-affinity"]))
        scopes = SCOPES_OF[kind] if draw(st.integers(0, 9)) else ANY_SCOPE
        found.append(Grouping(f"{prefix}{g}", members, rule, draw(st.sampled_from(scopes))))
    return found


@st.composite
def members(draw, prefix_s: str, prefix_v: str, most: int, attach_to: Sequence[str] = (),
            least: int = 1):
    servers = [ServerMember(f"{prefix_s}{i}", {"VCPU": draw(st.integers(0, 3)),
                                               "MEMORY_MB": draw(st.integers(0, 4)) * 512},
                            capabilities=draw(st.sampled_from([{}, {}, {}, {"color": "blue"}])))
               for i in range(draw(st.integers(least, most)))]
    targets = [*attach_to, *(s.name for s in servers)]
    volumes = [VolumeMember(f"{prefix_v}{i}", draw(st.integers(0, 30)),
                            draw(st.sampled_from([None, None, *TYPES])),
                            draw(st.sampled_from([None, None, *targets])))
               for i in range(draw(st.integers(least, most)))]
    return servers, volumes


@st.composite
def clusters(draw, most=5, count=5, least=1):
    servers, volumes = draw(members("s", "v", most))
    groupings = draw(groupings_over([s.name for s in servers], [v.name for v in volumes],
                                    "g", count, least=least))
    return servers, volumes, groupings


def contradiction(servers, volumes, groupings) -> InvalidInput | None:
    try:
        check_groupings(servers, volumes, groupings)
    except InvalidInput as caught:
        return caught
    return None


CLASH = re.compile(r"grouping (\S+) \(anti-affinity, (\w+)\): (\S+) and (\S+) must share a "
                   r"(\w+) by affinity \((.+)\)")
TIE = re.compile(r"grouping (\S+)|volume (\S+) attached to (\S+)")


def assert_real(caught: InvalidInput, servers, volumes, groupings, snapshot, backends) -> None:
    """A refused cluster is refused by the placer too, and an affinity clash is real.

    For "a and b must share a rack by affinity" it is enough that the affinity
    unit of a and b, with the anti-affinity of the pair alone, has no placement.
    """
    with pytest.raises(InvalidInput):
        place_vcluster(servers, volumes, groupings, snapshot, backends)
    found = CLASH.search(caught.message)
    event("refused: affinity clash" if found else "refused: invalid")
    if found is None:
        assert "by affinity" not in caught.message, caught.message
        return
    name, scope, a, b, _, forcing = found.groups()
    assert any(g.name == name and g.rule == "anti-affinity" and {a, b} <= set(g.members)
               for g in groupings)
    # The other side of the contradiction: affinities (and attachments) that chain a to b.
    affinities = {g.name: set(g.members) for g in groupings if g.rule == "affinity"}
    named = []
    for tie in forcing.split(", "):
        grouping, volume, server = TIE.fullmatch(tie).groups()
        named.append(affinities[grouping] if grouping else {volume, server})
    chained = {a}
    while any(tie & chained and not tie <= chained for tie in named):
        chained |= next(tie for tie in named if tie & chained and not tie <= chained)
    assert b in chained, caught.message
    unit = {a}
    ties = [set(g.members) for g in groupings if g.rule == "affinity"]
    ties += [{v, s} for v, s in expected_attachments(servers, volumes, groupings).items()]
    while any(tie & unit and not tie <= unit for tie in ties):
        unit |= next(tie for tie in ties if tie & unit and not tie <= unit)
    assert b in unit, caught.message
    relaxed = [g for g in groupings if g.rule == "affinity" and set(g.members) <= unit]
    relaxed.append(Grouping(name, [a, b], "anti-affinity", scope))
    assert not solvable([s for s in servers if s.name in unit],
                        [v for v in volumes if v.name in unit], relaxed), caught.message


# -- the properties --------------------------------------------------------------------------


@SETTINGS
@given(st.booleans().flatmap(lambda roomy: clouds(roomy=roomy)), clusters(),
       st.integers(0, 3), st.sampled_from(["spread", "pack"]))
def test_any_answer_that_fits_keeps_every_rule(cloud, cluster, alternates, weigher):
    snapshot, backends, inventories = cloud
    servers, volumes, groupings = cluster
    caught = contradiction(servers, volumes, groupings)
    if caught is not None:
        assert_real(caught, servers, volumes, groupings, snapshot, backends)
        return
    before = copy.deepcopy((snapshot.hosts, backends))
    result = place_vcluster(servers, volumes, groupings, snapshot, backends,
                            alternates=alternates, weigher=weigher)
    assert copy.deepcopy((snapshot.hosts, backends)) == before  # nothing changed
    # Determinism: the same members, hosts and backends in another order give the same
    # answer (groupings keep theirs: an explanation names the first one that stopped it).
    again = place_vcluster(servers[::-1], volumes[::-1], groupings,
                           CloudSnapshot(snapshot.hosts[::-1]), backends[::-1],
                           alternates=alternates, weigher=weigher)
    assert json.dumps(again.to_dict(), sort_keys=True) == json.dumps(result.to_dict(),
                                                                      sort_keys=True)
    if not result.fits:
        event("does not fit")
        assert result.explanation
        assert (result.hosts, result.backends, result.attachments, result.domains) == (
            {}, {}, {}, {})
        return
    event(f"fits: {len(servers) + len(volumes)} members, {len(groupings)} groupings")
    assert_placement(servers, volumes, groupings, snapshot, backends, inventories, result,
                     alternates)
    assert sorted(result.domains) == sorted(g.name for g in groupings)


def pinned_state(snapshot, backends, result, servers, volumes, down: list[bool]):
    """The cloud once the cluster is built: its usage counted, some hosts gone down."""
    hosts = {h.name: copy.deepcopy(h) for h in snapshot.hosts}
    for s in servers:
        used = hosts[result.host_of(s.name)].used
        for rc, n in s.resources.items():
            used[rc] = used.get(rc, 0) + n
    for h, gone in zip(sorted(hosts), down, strict=False):
        if gone:
            hosts[h].state = "down"
    built = {b.name: copy.deepcopy(b) for b in backends}
    for v in volumes:
        built[result.backend_of(v.name)].used_gb += v.size_gb
    return CloudSnapshot(hosts.values()), list(built.values())


@SETTINGS
@given(clouds(roomy=True), clusters(most=3, count=2, least=0), st.data())
def test_an_update_keeps_pinned_members_and_every_grouping(cloud, cluster, data):
    snapshot, backends, inventories = cloud
    servers, volumes, groupings = cluster
    if contradiction(servers, volumes, groupings) is not None:
        return
    first = place_vcluster(servers, volumes, groupings, snapshot, backends)
    if not first.fits:
        event("first pass does not fit")
        return
    down = data.draw(st.lists(st.booleans(), max_size=len(snapshot.hosts)))
    snapshot, backends = pinned_state(snapshot, backends, first, servers, volumes, down)
    pinned_hosts = {s.name: first.host_of(s.name) for s in servers}
    pinned_backends = {v.name: first.backend_of(v.name) for v in volumes}
    # Everything pinned, nothing new: the cluster holds where it is, down hosts or not.
    same = place_vcluster(servers, volumes, groupings, snapshot, backends,
                          pinned_hosts=pinned_hosts, pinned_backends=pinned_backends)
    assert same.fits, same.explanation
    assert same.hosts == {s: [h] for s, h in pinned_hosts.items()}
    assert same.backends == {v: [b] for v, b in pinned_backends.items()}
    assert same.domains == first.domains
    # New members, groupings over old and new ones, old groupings grown by new members.
    new_servers, new_volumes = data.draw(members("n", "w", 2, [s.name for s in servers],
                                                 least=0))
    if not new_servers and not new_volumes:
        new_servers = [ServerMember("n0", {"VCPU": 1})]
    old = [s.name for s in servers] + [v.name for v in volumes]
    new = [s.name for s in new_servers] + [v.name for v in new_volumes]
    grown = []
    for g in groupings:
        extra = data.draw(st.lists(st.sampled_from(new), max_size=2, unique=True)) if new else []
        grown.append(Grouping(g.name, [*g.members, *extra], g.rule, g.scope))
    added = data.draw(groupings_over([*pinned_hosts, *(s.name for s in new_servers)],
                                     [*pinned_backends, *(v.name for v in new_volumes)],
                                     "u", 3, must=[old, new]))
    all_servers, all_volumes = servers + new_servers, volumes + new_volumes
    caught = contradiction(all_servers, all_volumes, grown + added)
    if caught is not None:
        assert_real(caught, all_servers, all_volumes, grown + added, snapshot, backends)
        return
    alternates = data.draw(st.integers(0, 2))
    result = place_vcluster(all_servers, all_volumes, grown + added, snapshot, backends,
                            alternates=alternates, pinned_hosts=pinned_hosts,
                            pinned_backends=pinned_backends)
    again = place_vcluster(all_servers, all_volumes, grown + added, snapshot, backends,
                           alternates=alternates, pinned_hosts=dict(pinned_hosts),
                           pinned_backends=dict(pinned_backends))
    assert again.to_dict() == result.to_dict()
    if not result.fits:
        event("update does not fit")
        assert result.explanation
        return
    event(f"update fits: {len(new)} new members, {len(added)} new groupings")
    assert_placement(all_servers, all_volumes, grown + added, snapshot, backends, inventories,
                     result, alternates, pinned_hosts, pinned_backends)
