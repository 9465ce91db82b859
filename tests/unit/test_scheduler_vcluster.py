"""Joint placement of a virtual cluster's servers and volumes: rules of every kind and
scope, attachments, contradictions, filters, explanations, determinism, all-or-nothing,
and a property test over random small clouds."""

import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import CloudSnapshot, HostState
from fleetflow.scheduler.vcluster.place import (
    BackendState,
    Grouping,
    ServerMember,
    VClusterPlacement,
    VolumeMember,
    check_groupings,
    place_vcluster,
)


def host(name, rack="r0", zone="z0", vcpu=8, state="up", **extra):
    return HostState(name, state=state, region="na", zone=zone, rack=rack,
                     capacity={"VCPU": vcpu}, **extra)


def shared(rack, zone="z0", gb=1000, types=("ssd", "hdd"), used=0):
    return BackendState(f"rb-{zone}-{rack}", region="na", zone=zone, rack=rack, capacity_gb=gb,
                        used_gb=used, volume_types=frozenset(types))


def local(host_name, rack="r0", zone="z0", gb=1000, types=("ssd",), used=0):
    return BackendState(f"lb-{host_name}", scope="host", host_name=host_name, region="na",
                        zone=zone, rack=rack, capacity_gb=gb, used_gb=used,
                        volume_types=frozenset(types))


def cloud(racks=4, per_rack=2, zones=1):
    """``racks`` racks per zone of ``per_rack`` hosts, a shared backend per rack."""
    hosts, backends = [], []
    for z in range(zones):
        for r in range(racks):
            backends.append(shared(f"r{r}", zone=f"z{z}"))
            for i in range(per_rack):
                hosts.append(host(f"h{z}{r}{i}", rack=f"r{r}", zone=f"z{z}"))
    return CloudSnapshot(hosts), backends


def srv(name, vcpu=1, **extra):
    return ServerMember(name, {"VCPU": vcpu}, **extra)


def vol(name, gb=10, vtype=None, attach_to=None):
    return VolumeMember(name, gb, vtype, attach_to)


def place(servers, volumes, groupings, snapshot, backends, **options):
    result = place_vcluster(servers, volumes, groupings, snapshot, backends, **options)
    if result.fits:
        assert_valid(servers, volumes, groupings, snapshot, backends, result)
    return result


def reach(snapshot, backends_by_name, host_name, backend_name):
    backend, h = backends_by_name[backend_name], snapshot.by_name[host_name]
    if backend.scope == "host":
        return backend.host_name == host_name
    return backend.domain("rack") == h.domain("rack")


def assert_valid(servers, volumes, groupings, snapshot, backends, result):
    """Every rule, capacity and type the placement claims to keep, checked from scratch."""
    by_backend = {b.name: b for b in backends}
    kinds = {s.name: "s" for s in servers} | {v.name: "v" for v in volumes}
    host_of = {s.name: result.host_of(s.name) for s in servers}
    backend_of = {v.name: result.backend_of(v.name) for v in volumes}
    assert set(result.hosts) == set(host_of) and set(result.backends) == set(backend_of)
    for h in host_of.values():
        assert snapshot.by_name[h].state == "up"
    used = Counter()
    for s in servers:
        for rc, n in s.resources.items():
            used[(host_of[s.name], rc)] += n
    for (h, rc), n in used.items():
        state = snapshot.by_name[h]
        assert state.used.get(rc, 0) + n <= state.capacity.get(rc, 0)
    gb = Counter()
    for v in volumes:
        b = by_backend[backend_of[v.name]]
        gb[b.name] += v.size_gb
        assert v.volume_type is None or v.volume_type in b.volume_types
    for name, n in gb.items():
        assert by_backend[name].used_gb + n <= by_backend[name].capacity_gb
    for v, s in result.attachments.items():
        assert reach(snapshot, by_backend, host_of[s], backend_of[v])
    for v in volumes:
        if v.attach_to:
            assert result.attachments[v.name] == v.attach_to

    def where(member, scope):
        if kinds[member] == "s":
            return snapshot.by_name[host_of[member]].domain(scope)
        return by_backend[backend_of[member]].domain(scope)

    for g in groupings:
        for i, a in enumerate(g.members):
            for b in g.members[i + 1:]:
                pair = "".join(sorted(kinds[a] + kinds[b]))
                if g.rule == "affinity":
                    if pair == "ss":
                        assert where(a, g.scope or "host") == where(b, g.scope or "host")
                    elif pair == "vv":
                        assert backend_of[a] == backend_of[b]
                    else:
                        s, v = (a, b) if kinds[a] == "s" else (b, a)
                        assert reach(snapshot, by_backend, host_of[s], backend_of[v])
                else:
                    default = {"ss": "host", "vv": "rack", "sv": "rack"}[pair]
                    scope = g.scope or default
                    assert where(a, scope) != where(b, scope), (g, a, b)
                    if pair == "vv":
                        assert backend_of[a] != backend_of[b]


# -- the examples of docs/vcluster.md -----------------------------------------------


def test_a_server_and_its_volume_are_attached_on_the_host_local_backend_first():
    snapshot = CloudSnapshot([host("h0"), host("h1"), host("h2", rack="r1")])
    # The local disk is fuller than the rack's backend: taken all the same when reachable.
    backends = [shared("r0"), shared("r1"), local("h1", used=500)]
    # Spread picks h0 (first by name); it has no disk of its own, so the volume
    # goes to the rack's shared backend h0 reaches.
    result = place([srv("web")], [vol("data")], [Grouping("g", ["web", "data"], "affinity")],
                   snapshot, backends)
    assert result.fits and result.attachments == {"data": "web"}
    assert (result.host_of("web"), result.backends["data"]) == ("h0", ["rb-z0-r0"])
    # Where the chosen host has a disk of its own, the volume takes it.
    snapshot = CloudSnapshot([host("h1"), host("h2", rack="r1")])
    result = place([srv("web")], [vol("data")], [Grouping("g", ["web", "data"], "affinity")],
                   snapshot, backends)
    assert (result.host_of("web"), result.backends["data"]) == ("h1", ["lb-h1", "rb-z0-r0"])
    assert result.domains == {"g": {"web": "h1", "data": "lb-h1"}}


def test_two_servers_with_their_volumes_apart_on_hosts_and_racks():
    snapshot, backends = cloud(racks=3, per_rack=2)
    servers, volumes = [srv("a"), srv("b")], [vol("va"), vol("vb")]
    groupings = [Grouping("ga", ["a", "va"], "affinity"), Grouping("gb", ["b", "vb"], "affinity"),
                 Grouping("servers", ["a", "b"], "anti-affinity"),
                 Grouping("volumes", ["va", "vb"], "anti-affinity")]
    result = place(servers, volumes, groupings, snapshot, backends)
    assert result.fits and result.attachments == {"va": "a", "vb": "b"}
    assert result.host_of("a") != result.host_of("b")
    racks = result.domains["volumes"]
    assert racks["va"] != racks["vb"]
    # Same rack for both servers would have been fine for the servers alone.
    assert result.domains["servers"] == {"a": "h000", "b": "h010"}


# -- every rule and scope --------------------------------------------------------------


@pytest.mark.parametrize("scope", [None, "host", "rack", "zone"])
def test_server_anti_affinity_per_scope(scope):
    snapshot, backends = cloud(racks=2, per_rack=2, zones=2)
    groupings = [Grouping("g", ["a", "b", "c"], "anti-affinity", scope)]
    result = place([srv("a"), srv("b"), srv("c")], [], groupings, snapshot, backends)
    if scope == "zone":
        assert not result.fits  # two zones for three servers
        assert result.explanation == "grouping g (anti-affinity, zone): 2 zones -> 0"
        return
    domain = scope or "host"
    assert len({snapshot.by_name[result.host_of(s)].domain(domain) for s in "abc"}) == 3


@pytest.mark.parametrize("scope", [None, "host", "rack", "zone"])
def test_server_affinity_per_scope(scope):
    snapshot, backends = cloud(racks=2, per_rack=2, zones=2)
    groupings = [Grouping("g", ["a", "b", "c"], "affinity", scope),
                 Grouping("apart", ["a", "b"], "anti-affinity", "host" if scope in
                          ("rack", "zone") else "rack" if scope is None else "zone")]
    if scope in (None, "host"):
        with pytest.raises(InvalidInput):  # one host is in one rack and zone
            check_groupings([srv("a"), srv("b"), srv("c")], [], groupings)
        groupings = groupings[:1]
    result = place([srv("a", 2), srv("b", 2), srv("c", 2)], [], groupings, snapshot, backends)
    assert result.fits
    domain = scope or "host"
    assert len({snapshot.by_name[result.host_of(s)].domain(domain) for s in "abc"}) == 1


def test_host_affinity_needs_one_host_with_room_for_all():
    snapshot, backends = cloud(racks=2, per_rack=2)
    groupings = [Grouping("g", ["a", "b"], "affinity")]
    assert place([srv("a", 5), srv("b", 3)], [], groupings, snapshot, backends).fits
    result = place([srv("a", 5), srv("b", 4)], [], groupings, snapshot, backends)
    assert not result.fits and result.hosts == {}
    assert result.explanation == "servers a, b: resources (VCPU): 4 hosts -> 0"


@pytest.mark.parametrize("scope", [None, "backend", "rack", "zone"])
def test_volume_anti_affinity_per_scope(scope):
    snapshot, backends = cloud(racks=2, per_rack=1, zones=2)
    backends.append(shared("r0", zone="z0", gb=500))  # a second backend in rack r0 of z0
    backends[-1].name = "rb-second"
    volumes = [vol("x"), vol("y"), vol("z")]
    result = place([], volumes, [Grouping("g", ["x", "y", "z"], "anti-affinity", scope)],
                   snapshot, backends)
    if scope == "zone":
        assert not result.fits
        assert result.explanation == "grouping g (anti-affinity, zone): 2 zones -> 0"
        return
    assert result.fits
    domain = scope or "rack"
    by_name = {b.name: b for b in backends}
    assert len({by_name[result.backend_of(v)].domain(domain) for v in "xyz"}) == 3


def test_volume_affinity_shares_one_backend_with_the_room_and_types_of_all():
    backends = [shared("r0", gb=100, types=("ssd",)), shared("r1", gb=100, types=("ssd", "hdd")),
                shared("r2", gb=40, types=("ssd", "hdd"))]
    snapshot = CloudSnapshot([host("h")])
    volumes = [vol("x", 30, "ssd"), vol("y", 30, "hdd")]
    result = place([], volumes, [Grouping("g", ["x", "y"], "affinity")], snapshot, backends)
    assert result.backends == {"x": ["rb-z0-r1"], "y": ["rb-z0-r1"]}
    result = place([], [vol("x", 60, "ssd"), vol("y", 60, "hdd")],
                   [Grouping("g", ["x", "y"], "affinity")], snapshot, backends)
    assert not result.fits
    assert result.explanation == ("grouping g (affinity, backend): no backend holds x, y "
                                  "together (120 GB, hdd, ssd): 3 backends -> 0")


@pytest.mark.parametrize("scope", [None, "rack", "host", "zone"])
def test_server_volume_anti_affinity(scope):
    snapshot = CloudSnapshot([host("h0"), host("h1", rack="r1", zone="z1")])
    backends = [local("h0"), shared("r0"), shared("r1", zone="z1")]
    groupings = [Grouping("g", ["s", "v"], "anti-affinity", scope),
                 Grouping("pin", ["s", "other"], "affinity")]
    servers = [srv("s"), srv("other")]
    # The pinned pair goes to h0 (first by name); the volume must leave its domain.
    result = place(servers, [vol("v")], groupings, snapshot, backends)
    assert result.host_of("s") == "h0"
    expected = {"host": {"rb-z0-r0", "rb-z1-r1"}}.get(scope, {"rb-z1-r1"})
    assert result.backend_of("v") in expected


def test_a_server_placed_after_its_anti_affine_volume_avoids_the_volume_rack():
    snapshot = CloudSnapshot([host("h0"), host("h1", rack="r1")])
    backends = [shared("r0", gb=100), shared("r1", gb=100)]
    # The volume is the larger share of its pool, so it is placed first, in r0.
    result = place([srv("s")], [vol("v", gb=90)], [Grouping("g", ["s", "v"], "anti-affinity")],
                   snapshot, backends)
    assert (result.host_of("s"), result.backend_of("v")) == ("h1", "rb-z0-r0")


def test_a_mixed_grouping_applies_each_pair_kind_its_own_default_scope():
    snapshot, backends = cloud(racks=3, per_rack=2)
    groupings = [Grouping("g", ["a", "b", "va", "vb"], "anti-affinity")]
    result = place([srv("a"), srv("b")], [vol("va"), vol("vb")], groupings, snapshot, backends)
    assert result.fits
    assert result.domains["g"]["a"] != result.domains["g"]["b"]  # hosts
    assert result.domains["g"]["va"] != result.domains["g"]["vb"]  # racks
    # ... and no volume sits in a server's rack.
    groupings = [Grouping("g", ["a", "b", "va"], "anti-affinity")]
    result = place([srv("a"), srv("b")], [vol("va")], groupings, *cloud(racks=2))
    assert result.domains["g"] == {"a": "h000", "b": "h001", "va": "na/z0/r1"}
    result = place([srv("a"), srv("b")], [vol("va")], groupings, *cloud(racks=1))
    assert result.explanation == "grouping g (anti-affinity, rack): 1 racks -> 0"


def test_attach_to_needs_the_host_to_reach_the_backend():
    snapshot = CloudSnapshot([host("h0"), host("h1", rack="r1")])
    backends = [shared("r0", types=("hdd",)), shared("r1", types=("ssd",))]
    result = place([srv("s")], [vol("v", vtype="ssd", attach_to="s")], [], snapshot, backends)
    assert (result.host_of("s"), result.backend_of("v")) == ("h1", "rb-z0-r1")
    assert result.attachments == {"v": "s"}
    assert result.hosts["s"] == ["h1"]  # h0 reaches no ssd backend: no alternate


def test_servers_sharing_a_volume_share_its_rack():
    snapshot, backends = cloud(racks=2, per_rack=2)
    # Neither grouping is one server with one volume, so nothing is attached.
    groupings = [Grouping("g1", ["a", "v", "w"], "affinity"),
                 Grouping("g2", ["b", "v", "x"], "affinity"),
                 Grouping("apart", ["a", "b"], "anti-affinity")]
    result = place([srv("a"), srv("b")], [vol("v"), vol("w"), vol("x")], groupings, snapshot,
                   backends)
    assert result.fits and result.attachments == {}
    racks = {snapshot.by_name[result.host_of(s)].rack for s in "ab"}
    assert len(racks) == 1 and result.host_of("a") != result.host_of("b")
    assert {result.backend_of(v) for v in "vwx"} == {f"rb-z0-{racks.pop()}"}


# -- contradictions --------------------------------------------------------------------


@pytest.mark.parametrize("servers, volumes, groupings, field, words", [
    ([srv("a")], [vol("x")], [Grouping("g", ["a", "nope"], "affinity")], "groupings",
     "unknown member 'nope'"),
    ([srv("a"), srv("a")], [], [], "instances", "duplicate member name 'a'"),
    ([srv("a")], [vol("a")], [], "instances", "duplicate member name 'a'"),
    ([srv("a"), srv("b")], [], [Grouping("g", ["a", "b"], "affinity", "host"),
                                Grouping("h", ["a", "b"], "anti-affinity", "host")],
     "groupings",
     "grouping h (anti-affinity, host): a and b must share a host by affinity (grouping g)"),
    ([srv(n) for n in "abcde"], [],
     [Grouping("other", ["d", "e"], "affinity", "host"),
      Grouping("g1", ["a", "c"], "affinity", "host"),
      Grouping("g2", ["c", "b"], "affinity", "host"),
      Grouping("h", ["a", "b"], "anti-affinity", "host")],
     "groupings", "a and b must share a host by affinity (grouping g1, grouping g2)"),
    ([srv("a"), srv("b")], [vol("v"), vol("w"), vol("x")],
     [Grouping("g1", ["a", "v", "w"], "affinity"), Grouping("g2", ["b", "v", "x"], "affinity"),
      Grouping("h", ["a", "b"], "anti-affinity", "rack")],
     "groupings", "a and b must share a rack by affinity (grouping g1, grouping g2)"),
    ([srv("a"), srv("b")], [vol("v")], [Grouping("g1", ["a", "v"], "affinity"),
                                        Grouping("g2", ["b", "v"], "affinity")],
     "groupings", "volume v would be attached to b and to a"),
    ([srv("a")], [vol("v"), vol("w")], [Grouping("g", ["v", "w"], "affinity"),
                                        Grouping("h", ["v", "w"], "anti-affinity", "backend")],
     "groupings", "v and w must share a backend by affinity (grouping g)"),
    ([srv("a")], [vol("v", attach_to="a")], [Grouping("h", ["a", "v"], "anti-affinity")],
     "groupings", "a and v must share a rack by affinity (volume v attached to a)"),
    ([srv("a")], [vol("v", attach_to="w"), vol("w")], [], "instances", "is a volume"),
    ([srv("a")], [vol("v", attach_to="b")], [], "instances", "names no server"),
    ([srv("a"), srv("b")], [], [Grouping("g", ["a", "b"], "together")], "groupings",
     "unknown rule 'together'"),
    ([srv("a"), srv("b")], [], [Grouping("g", ["a", "b"], "affinity", "planet")], "groupings",
     "unknown scope 'planet'"),
    ([srv("a"), srv("b")], [], [Grouping("g", ["a", "b"], "affinity", "backend")], "groupings",
     "scope 'backend' does not apply to servers"),
    ([srv("a")], [vol("v"), vol("w")], [Grouping("g", ["v", "w"], "anti-affinity", "host")],
     "groupings", "scope 'host' does not apply to volumes"),
    ([srv("a"), srv("b")], [vol("v", attach_to="a")], [Grouping("g", ["b", "v"], "affinity")],
     "groupings", "attached to b and to a"),
])
def test_contradictions_are_invalid_input(servers, volumes, groupings, field, words):
    with pytest.raises(InvalidInput) as caught:
        check_groupings(servers, volumes, groupings)
    assert caught.value.details["field"] == field
    assert words in caught.value.message
    with pytest.raises(InvalidInput):
        place_vcluster(servers, volumes, groupings, *cloud())


def test_compatible_rules_are_accepted():
    check_groupings([srv("a"), srv("b")], [vol("v")],
                    [Grouping("g", ["a", "b"], "affinity", "rack"),
                     Grouping("h", ["a", "b"], "anti-affinity", "host"),
                     Grouping("i", ["a", "v"], "anti-affinity", "host")])


# -- filters and explanations ------------------------------------------------------------


def test_volume_type_and_capacity_filters_are_explained():
    snapshot, backends = cloud(racks=20, per_rack=1)
    for b in backends:
        b.volume_types = frozenset({"hdd"})
    result = place([srv("db")], [vol("db-vol-1", vtype="ssd")], [], snapshot, backends)
    assert not result.fits
    assert result.explanation == "volume db-vol-1: volume_type ssd: 20 backends -> 0"
    result = place([], [vol("big", gb=5000)], [], snapshot, backends)
    assert result.explanation == "volume big: capacity: 20 backends -> 0"
    backends[3].used_gb = 990
    result = place([], [vol("a", gb=995, vtype="hdd")], [], snapshot, backends)
    assert result.fits and result.backend_of("a") != backends[3].name


def test_host_filters_are_explained():
    snapshot = CloudSnapshot([host("h0", capabilities={"gpu": True}), host("h1"),
                              host("h2", state="down", capabilities={"gpu": True})])
    result = place([srv("g", capabilities={"gpu": "true"})], [], [], snapshot, [])
    assert result.hosts == {"g": ["h0"]}
    result = place([srv("g", vcpu=9, capabilities={"gpu": "true"})], [], [], snapshot, [])
    assert result.explanation == ("server g: state: 3 hosts -> 2, capabilities: 2 hosts -> 1, "
                                  "resources (VCPU): 1 hosts -> 0")
    result = place([srv("s")], [vol("v", attach_to="s")], [], snapshot, [])
    assert result.explanation == "volume v: capacity: 0 backends -> 0"


def test_capacity_counts_what_the_pass_placed():
    snapshot = CloudSnapshot([host("h0", vcpu=4), host("h1", vcpu=4)])
    backends = [shared("r0", gb=100)]
    servers = [srv(f"s{i}", 2) for i in range(4)]
    result = place(servers, [vol("a", 60), vol("b", 40)], [], snapshot, backends)
    assert Counter(result.host_of(s.name) for s in servers) == {"h0": 2, "h1": 2}
    result = place([*servers, srv("s4")], [], [], snapshot, backends)
    assert not result.fits and result.explanation == "server s4: resources (VCPU): 2 hosts -> 0"
    result = place([], [vol("a", 60), vol("b", 41)], [], snapshot, backends)
    assert not result.fits and result.explanation == "volume b: capacity: 1 backends -> 0"


def test_anti_affinity_exhausted_names_the_grouping_and_places_nothing():
    snapshot, backends = cloud(racks=16, per_rack=2)
    servers = [srv(f"s{i}") for i in range(17)]
    result = place(servers, [], [Grouping("group-3", [s.name for s in servers], "anti-affinity",
                                          "rack")], snapshot, backends)
    assert not result.fits
    assert result.explanation == "grouping group-3 (anti-affinity, rack): 16 racks -> 0"
    assert (result.hosts, result.backends, result.attachments, result.domains) == ({}, {}, {},
                                                                                   {})


def test_a_unit_that_cannot_hold_together_names_its_affinity():
    snapshot = CloudSnapshot([host("h0"), host("h1", rack="r1")])
    backends = [shared("r0", types=("hdd",)), shared("r1", types=("ssd",))]
    groupings = [Grouping("pair", ["a", "b"], "affinity", "rack"),
                 Grouping("ga", ["a", "va"], "affinity"), Grouping("gb", ["b", "vb"], "affinity")]
    result = place([srv("a"), srv("b")], [vol("va", vtype="hdd"), vol("vb", vtype="ssd")],
                   groupings, snapshot, backends)
    assert not result.fits
    assert result.explanation.startswith("grouping pair (affinity): no placement holds a, b, "
                                         "va, vb together")


def test_down_hosts_are_not_used():
    snapshot = CloudSnapshot([host("h0", state="down"), host("h1", state="maintenance"),
                              host("h2")])
    result = place([srv("a"), srv("b")], [], [], snapshot, [], alternates=3)
    assert result.hosts == {"a": ["h2"], "b": ["h2"]}


# -- spread, alternates, determinism, result ---------------------------------------------


def test_spread_prefers_the_most_free_and_pack_the_least():
    snapshot = CloudSnapshot([host("h0", used={"VCPU": 4}), host("h1"), host("h2",
                                                                            used={"VCPU": 2})])
    assert place([srv("a")], [], [], snapshot, [], alternates=1).hosts == {"a": ["h1", "h2"]}
    assert place([srv("a")], [], [], snapshot, [], weigher="pack").host_of("a") == "h0"
    backends = [shared("r0", used=500), shared("r1", used=100)]
    assert place([], [vol("v")], [], snapshot, backends).backends == {"v": ["rb-z0-r1",
                                                                             "rb-z0-r0"]}


def test_alternates_keep_every_rule():
    snapshot, backends = cloud(racks=3, per_rack=3)
    groupings = [Grouping("apart", ["a", "b", "c"], "anti-affinity", "rack"),
                 Grouping("ga", ["a", "va"], "affinity")]
    result = place([srv("a"), srv("b"), srv("c")], [vol("va")], groupings, snapshot, backends,
                   alternates=5)
    by_name = {b.name: b for b in backends}
    for name in "abc":
        home = snapshot.by_name[result.host_of(name)]
        for alternate in result.hosts[name][1:]:
            # An alternate stays in the member's own rack: the others hold the rest.
            assert snapshot.by_name[alternate].rack == home.rack
    assert all(reach(snapshot, by_name, h, result.backend_of("va")) for h in result.hosts["a"])
    assert result.backends["va"] == ["rb-z0-r0"]  # the only backend a's rack reaches
    assert place([srv("a")], [], [], snapshot, backends, alternates=0).hosts == {"a": ["h000"]}


def test_same_input_same_result_whatever_the_order():
    snapshot, backends = cloud(racks=4, per_rack=3, zones=2)
    servers = [srv(f"s{i}", 1 + i % 3) for i in range(12)]
    volumes = [vol(f"v{i}", 10 * (1 + i % 4)) for i in range(12)]
    groupings = [Grouping(f"a{i}", [f"s{i}", f"v{i}"], "affinity") for i in range(0, 12, 2)]
    groupings += [Grouping("sa", [f"s{i}" for i in range(6)], "anti-affinity", "rack"),
                  Grouping("va", [f"v{i}" for i in range(6, 12)], "anti-affinity")]
    first = place(servers, volumes, groupings, snapshot, backends).to_dict()
    again = place(servers[::-1], volumes[::-1], groupings[::-1],
                  CloudSnapshot(snapshot.hosts[::-1]), backends[::-1]).to_dict()
    assert first["fits"]
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_explanations_list_members_by_name_whatever_the_input_order():
    snapshot, backends = cloud(racks=2, per_rack=2)
    servers = [srv("c", 5), srv("a", 5), srv("b", 5)]
    volumes = [vol("z", 600), vol("x", 600)]
    groupings = [Grouping("g", ["c", "a", "b"], "affinity"), Grouping("v", ["z", "x"], "affinity")]
    for order in (list, reversed):
        result = place(list(order(servers)), [], groupings[:1], snapshot, backends)
        assert result.explanation == "servers a, b, c: resources (VCPU): 4 hosts -> 0"
        result = place([], list(order(volumes)), groupings[1:], snapshot, backends)
        assert result.explanation == ("grouping v (affinity, backend): no backend holds x, z "
                                      "together (1200 GB): 2 backends -> 0")


def test_result_round_trips_through_json_and_inputs_stay_untouched():
    snapshot, backends = cloud()
    result = place([srv("a")], [vol("v", attach_to="a")], [], snapshot, backends)
    data = json.loads(json.dumps(result.to_dict()))
    assert VClusterPlacement.from_dict(data) == result
    assert all(not h.used for h in snapshot.hosts) and all(not b.used_gb for b in backends)
    assert BackendState.from_dict({"name": "b", "volume_types": ["ssd"]}).volume_types == {"ssd"}


def test_a_large_cluster_fits_in_one_pass():
    hosts = [host(f"h{i:04d}", rack=f"r{i // 16:03d}", zone=f"z{i // 320}", vcpu=32)
             for i in range(1600)]
    backends = [shared(f"r{r:03d}", zone=f"z{r * 16 // 320}", gb=100000) for r in range(100)]
    servers = [srv(f"s{i:03d}", 2) for i in range(200)]
    volumes = [vol(f"v{i:03d}", 100, "ssd") for i in range(200)]
    groupings = [Grouping(f"a{i}", [f"s{i:03d}", f"v{i:03d}"], "affinity") for i in range(200)]
    for k in range(20):
        groupings.append(Grouping(f"sa{k}", [f"s{k * 10 + j:03d}" for j in range(10)],
                                  "anti-affinity"))
        groupings.append(Grouping(f"va{k}", [f"v{k * 10 + j:03d}" for j in range(10)],
                                  "anti-affinity"))
    result = place(servers, volumes, groupings, CloudSnapshot(hosts), backends)
    assert result.fits and len(result.attachments) == 200


# -- property ------------------------------------------------------------------------------


@st.composite
def clusters(draw):
    hosts, backends = [], []
    for i in range(draw(st.integers(0, 8))):
        vcpu = draw(st.integers(0, 6))
        hosts.append(HostState(f"h{i}", state=draw(st.sampled_from(["up"] * 5 + ["down"])),
                               region="na", zone=f"z{draw(st.integers(0, 1))}",
                               rack=f"r{draw(st.integers(0, 2))}", capacity={"VCPU": vcpu},
                               used={"VCPU": draw(st.integers(0, vcpu))},
                               capabilities={"color": draw(st.sampled_from(["blue", "red"]))}))
    for i in range(draw(st.integers(0, 6))):
        gb = draw(st.integers(0, 40))
        types = frozenset(draw(st.lists(st.sampled_from(["ssd", "hdd"]), max_size=2)))
        if hosts and draw(st.booleans()):
            owner = draw(st.sampled_from(hosts))
            backends.append(BackendState(f"b{i}", scope="host", host_name=owner.name,
                                         region="na", zone=owner.zone, rack=owner.rack,
                                         capacity_gb=gb, used_gb=draw(st.integers(0, gb)),
                                         volume_types=types))
        else:
            backends.append(BackendState(f"b{i}", region="na", zone=f"z{draw(st.integers(0, 1))}",
                                         rack=f"r{draw(st.integers(0, 2))}", capacity_gb=gb,
                                         used_gb=draw(st.integers(0, gb)), volume_types=types))
    servers = [ServerMember(f"s{i}", {"VCPU": draw(st.integers(0, 3))},
                            capabilities=draw(st.sampled_from([{}, {}, {"color": "blue"}])))
               for i in range(draw(st.integers(0, 5)))]
    names = [s.name for s in servers]
    volumes = [VolumeMember(f"v{i}", draw(st.integers(0, 15)),
                            draw(st.sampled_from([None, "ssd", "hdd"])),
                            draw(st.sampled_from([None, None, *names])))
               for i in range(draw(st.integers(0, 5)))]
    members = names + [v.name for v in volumes]
    groupings = []
    if members:
        for g in range(draw(st.integers(0, 4))):
            chosen = draw(st.lists(st.sampled_from(members), min_size=1, max_size=4,
                                   unique=True))
            groupings.append(Grouping(f"g{g}", chosen,
                                      draw(st.sampled_from(["affinity", "anti-affinity"])),
                                      draw(st.sampled_from([None, None, "host", "backend",
                                                            "rack", "zone"]))))
    return CloudSnapshot(hosts), backends, servers, volumes, groupings


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.integers(0, 3), st.sampled_from(["spread", "pack"]))
def test_any_placement_that_fits_keeps_every_rule(cluster, alternates, weigher):
    snapshot, backends, servers, volumes, groupings = cluster
    try:
        check_groupings(servers, volumes, groupings)
    except InvalidInput:
        with pytest.raises(InvalidInput):
            place_vcluster(servers, volumes, groupings, snapshot, backends)
        return
    result = place_vcluster(servers, volumes, groupings, snapshot, backends,
                            alternates=alternates, weigher=weigher)
    if not result.fits:
        assert result.explanation
        assert (result.hosts, result.backends, result.attachments) == ({}, {}, {})
        return
    assert_valid(servers, volumes, groupings, snapshot, backends, result)
    for s in servers:
        assert s.capabilities == {} or snapshot.by_name[result.host_of(s.name)].capabilities[
            "color"] == "blue"
        assert len(result.hosts[s.name]) == len(set(result.hosts[s.name])) <= 1 + alternates
