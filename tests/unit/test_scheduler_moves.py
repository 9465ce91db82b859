"""Placing the servers of an evacuation in one pass: filters, capacity, balance, groups,
backends, alternates, explanations, determinism, and a property test over random fleets."""

import json
import random
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import CloudSnapshot, GroupSpec, HostState
from fleetflow.scheduler.moves.place import MovePlacement, ServerToMove, place_moves


def host(name, vcpu=8, mem=8192, state="up", zone="z0", rack="r0", used=None, **extra):
    return HostState(name, uuid=f"u-{name}", state=state, region="na", zone=zone, rack=rack,
                     capacity={"VCPU": vcpu, "MEMORY_MB": mem}, used=dict(used or {}), **extra)


def fleet(*hosts):
    return CloudSnapshot([host("src", vcpu=64, mem=65536), *hosts])


def server(key, vcpu=1, mem=0, source="src", **extra):
    return ServerToMove(key, source, {"VCPU": vcpu, "MEMORY_MB": mem}, **extra)


def primaries(result):
    return {key: hosts[0] for key, hosts in result.candidates.items()}


# -- destinations ----------------------------------------------------------------------


def test_destinations_are_up_hosts_outside_the_pass():
    snapshot = CloudSnapshot([
        host("src"), host("src2"), host("a"), host("b", state="down"),
        host("c", state="maintenance"), host("d", state="disabled"), host("e"), host("f")])
    servers = [server(f"s{i}") for i in range(6)] + [server("t0", source="src2")]
    result = place_moves(servers, snapshot, excluded_hosts=["u-f"], alternates=3)
    assert not result.unplaced
    named = {h for hosts in result.candidates.values() for h in hosts}
    # src2 is up but is itself being emptied by this pass; f is excluded by uuid.
    assert named == {"a", "e"}
    assert Counter(primaries(result).values()) == {"a": 4, "e": 3}


def test_target_hosts_restrict_destinations_and_the_explanation_names_each_filter():
    snapshot = fleet(*[host(f"h{i}") for i in range(9)], host("down", state="down"))
    result = place_moves([server("small"), server("big", vcpu=12)], snapshot,
                         target_hosts=["h1", "u-h2", "down"])
    assert primaries(result) == {"small": "h1"}
    assert set(result.candidates["small"]) == {"h1", "h2"}
    assert result.unplaced == {"big": "no host fits: state: 11 -> 10, source-hosts: 10 -> 9, "
                                      "target_hosts: 9 -> 2, resources (VCPU): 2 -> 0"}


def test_no_destination_at_all_is_explained():
    result = place_moves([server("s")], fleet())
    assert result.unplaced == {"s": "no host fits: source-hosts: 1 -> 0"}
    assert result.candidates == {}


def test_server_keys_must_be_unique():
    with pytest.raises(InvalidInput):
        place_moves([server("s"), server("s")], fleet(host("a")))


# -- capacity and balance --------------------------------------------------------------


def test_heterogeneous_flavors_fit_with_usage_growing_through_the_pass():
    snapshot = fleet(host("cpu", vcpu=8, mem=4096), host("mem", vcpu=4, mem=16384))
    servers = [server("wide", vcpu=6, mem=1024), server("tall", vcpu=1, mem=12000),
               server("s1", vcpu=2, mem=1024), server("s2", vcpu=2, mem=1024),
               server("s3", vcpu=2, mem=1024)]
    result = place_moves(servers, snapshot)
    placed = primaries(result)
    assert placed["wide"] == "cpu" and placed["tall"] == "mem"
    used = defaultdict(Counter)
    for item in servers:
        if item.key in placed:
            used[placed[item.key]].update(item.resources)
    for name, total in used.items():
        for rc, amount in total.items():
            assert amount <= snapshot.by_name[name].capacity[rc]
    # 10 VCPUs were free after wide and tall; two of the three small ones fit.
    assert len(result.unplaced) == 1
    (reason,) = result.unplaced.values()
    assert reason.endswith("resources (VCPU): 2 -> 0")
    # The snapshot handed in is untouched: the pass used its own copy of usage.
    assert all(h.used == {} for h in snapshot.hosts)


def test_larger_servers_go_first_so_they_are_not_starved():
    snapshot = fleet(host("a", vcpu=4), host("b", vcpu=4))
    servers = [server(f"small{i}") for i in range(4)] + [server("big", vcpu=4)]
    result = place_moves(servers, snapshot)
    assert not result.unplaced
    placed = primaries(result)
    assert {placed[f"small{i}"] for i in range(4)} == {"a", "b"} - {placed["big"]}


def test_spread_balances_and_prefers_the_most_room():
    snapshot = fleet(host("a"), host("b"), host("c", used={"VCPU": 4}), host("d"))
    result = place_moves([server(f"s{i}") for i in range(10)], snapshot)
    # c, half used, waits until the others are as full; ties go by name.
    assert Counter(primaries(result).values()) == {"a": 4, "b": 3, "d": 3}
    packed = place_moves([server(f"s{i}") for i in range(6)], snapshot, weigher="pack")
    assert Counter(primaries(packed).values()) == {"c": 4, "a": 2}
    with pytest.raises(ValueError):
        place_moves([server("s")], snapshot, weigher="random")


# -- groups ----------------------------------------------------------------------------


def test_anti_affinity_counts_members_staying_and_members_moving_together():
    group = GroupSpec(id="g-1", policies=["anti-affinity"], member_hosts=["a"])
    snapshot = fleet(host("a"), host("b"), host("c"))
    result = place_moves([server("m1", group=group), server("m2", group=group),
                          server("other"), server("other2")], snapshot)
    placed = primaries(result)
    # Both members left the same host and must not meet, nor join the one on a.
    assert {placed["m1"], placed["m2"]} == {"b", "c"}
    result = place_moves([server(f"m{i}", group=group) for i in range(3)], snapshot)
    assert sorted(primaries(result).values()) == ["b", "c"]
    (reason,) = result.unplaced.values()
    assert reason == "no host fits: source-hosts: 4 -> 3, anti-affinity: 3 -> 0 (group g-1)"


def test_anti_affinity_limit_per_rack():
    group = GroupSpec(id="g", policies=["anti-affinity"], scope="rack", max_per_host=2,
                      member_hosts=["r0a"])
    snapshot = fleet(host("r0a", rack="r0"), host("r0b", rack="r0"), host("r1a", rack="r1"),
                     host("r1b", rack="r1"))
    result = place_moves([server(f"m{i}", group=group) for i in range(4)], snapshot)
    racks = Counter(snapshot.by_name[h].rack for h in primaries(result).values())
    assert racks == {"r0": 1, "r1": 2}
    assert len(result.unplaced) == 1


def test_affinity_moves_the_group_as_one_unit_onto_one_host():
    group = GroupSpec(id="g-1", policies=["affinity"])
    snapshot = fleet(host("a", vcpu=4), host("b", vcpu=8, used={"VCPU": 1}),
                     host("c", vcpu=8, used={"VCPU": 2}), host("d", vcpu=16))
    members = [server(f"m{i}", vcpu=2, group=group) for i in range(3)]
    result = place_moves([*members, server("x", vcpu=12)], snapshot)
    placed = primaries(result)
    # x takes d first (largest); the unit then needs 6 VCPUs on one host: b.
    assert placed == {"x": "d", "m0": "b", "m1": "b", "m2": "b"}
    # Alternates of a host-affinity member would split the group: there are none.
    assert all(result.candidates[m.key] == ["b"] for m in members)
    # A member not moving pins the unit to its host.
    group.member_hosts = ["c"]
    assert set(primaries(place_moves(members, snapshot)).values()) == {"c"}


def test_affinity_unit_that_fits_nowhere_is_unplaced_with_the_group_named():
    group = GroupSpec(id="g-1", policies=["affinity"])
    snapshot = fleet(host("a", vcpu=4), host("b", vcpu=4))
    servers = [ServerToMove(f"m{i}", "src", {"VCPU": 2}, group=group) for i in range(3)]
    result = place_moves([*servers, server("x")], snapshot)
    assert primaries(result) == {"x": "a"}
    assert result.unplaced == dict.fromkeys(
        ["m0", "m1", "m2"],
        "group g-1 (affinity): its 3 members need one host with VCPU 6 free; "
        "no host has that room (source-hosts: 3 -> 2)")
    group.member_hosts = ["gone"]
    result = place_moves(servers[:1], snapshot)
    assert result.unplaced["m0"].startswith(
        "group g-1 (affinity): its member needs one host with VCPU 2 free; members not "
        "moving are in gone, where no host is a destination")


def test_network_proximity_keeps_the_group_in_one_rack():
    group = GroupSpec(id="np", policies=["network-proximity"])
    snapshot = fleet(host("r0a", rack="r0", vcpu=4), host("r0b", rack="r0", vcpu=4),
                     host("r1a", rack="r1"), host("r1b", rack="r1"), host("r1c", rack="r1"))
    members = [server(f"m{i}", vcpu=3, group=group) for i in range(4)]
    result = place_moves(members, snapshot)
    placed = primaries(result)
    assert {snapshot.by_name[h].rack for h in placed.values()} == {"r1"}
    assert len(set(placed.values())) == 3  # spread inside the rack
    for hosts in result.candidates.values():
        assert all(snapshot.by_name[h].rack == "r1" for h in hosts[1:])
    # Members staying in r0 pull the group there; r0 holds only two of them.
    group.member_hosts = ["r0a"]
    result = place_moves(members[:2], snapshot)
    assert set(primaries(result).values()) == {"r0a", "r0b"}
    result = place_moves(members, snapshot)
    assert not result.candidates
    assert result.unplaced["m0"] == (
        "group np (network-proximity): its 4 members need one rack that holds them all "
        "(VCPU 12 in total); members not moving are in na/z0/r0; no rack has that room "
        "(source-hosts: 6 -> 5)")
    # Room enough in total, but two members of 3 leave no host for the third.
    uneven = [*members[:2], server("m9", vcpu=2, group=group)]
    result = place_moves(uneven, snapshot)
    assert set(result.unplaced) == {"m0", "m1", "m9"}
    assert "; 1 rack with that room cannot take them" in result.unplaced["m9"]


def test_network_proximity_with_anti_affinity_spreads_hosts_inside_the_rack():
    group = GroupSpec(id="np", policies=["network-proximity", "anti-affinity"])
    snapshot = fleet(host("r0a", rack="r0", vcpu=1), host("r1a", rack="r1", vcpu=16),
                     host("r1b", rack="r1", vcpu=4, used={"VCPU": 2}))
    members = [server("m0", group=group), server("m1", group=group)]
    # r1b is the fuller host: only the group rule sends a member there.
    assert primaries(place_moves(members, snapshot)) == {"m0": "r1a", "m1": "r1b"}
    result = place_moves([*members, server("m2", group=group)], snapshot)
    assert set(result.unplaced) == {"m0", "m1", "m2"}
    assert "; 1 rack with that room cannot take them" in result.unplaced["m0"]


def test_a_failed_unit_does_not_block_smaller_units_of_the_same_kind():
    gpu = {"gpu": True}
    snapshot = fleet(host("r0a", rack="r0", vcpu=4, capabilities=gpu),
                     host("r0b", rack="r0", vcpu=4, capabilities=gpu),
                     host("r1a", rack="r1", vcpu=8, used={"VCPU": 4}),
                     host("r1b", rack="r1", vcpu=16, used={"VCPU": 8}))

    def unit(name, *sizes, scope="rack", caps=None):
        group = GroupSpec(id=name, policies=["affinity"], scope=scope)
        return [server(f"{name}{i}", vcpu=n, group=group, capabilities=caps or {})
                for i, n in enumerate(sizes)]

    # big: r0 has the room in total, but no host for its 6: r1 takes it.
    # small: r0, the emptier rack, is still open to smaller members.
    result = place_moves([*unit("big", 6, 1), *unit("small", 2, 2)], snapshot)
    racks = {k: snapshot.by_name[h].rack for k, h in primaries(result).items()}
    assert racks == {"big0": "r1", "big1": "r1", "small0": "r0", "small1": "r0"}
    # Only r1 has 10 VCPUs free in total, but no gpu; r0 still takes a small gpu unit.
    result = place_moves([*unit("gbig", 5, 5, caps={"gpu": "true"}),
                          *unit("gsmall", 1, 1, caps={"gpu": "true"})], snapshot)
    assert set(result.unplaced) == {"gbig0", "gbig1"}
    assert {snapshot.by_name[h].rack for h in primaries(result).values()} == {"r0"}
    # The same on one host: no gpu host holds 8, one holds 2.
    result = place_moves([*unit("hbig", 4, 4, scope="host", caps={"gpu": "true"}),
                          *unit("hsmall", 1, 1, scope="host", caps={"gpu": "true"})],
                         snapshot)
    assert set(result.unplaced) == {"hbig0", "hbig1"}
    assert primaries(result) == {"hsmall0": "r0a", "hsmall1": "r0a"}
    # Room taken earlier in the pass counts: a takes 10 of r0, f1 and f2 12 of r1,
    # so only r0 has the 5 that b needs, and there no host has 4 left.
    snapshot = fleet(host("r0a", rack="r0"), host("r0b", rack="r0"),
                     host("r1a", rack="r1"), host("r1b", rack="r1"))
    result = place_moves([*unit("a", 5, 5), server("f1", vcpu=6), server("f2", vcpu=6),
                          *unit("b", 4, 1)], snapshot)
    assert primaries(result) == {"a0": "r0a", "a1": "r0b", "f1": "r1a", "f2": "r1b"}
    assert result.unplaced["b0"] == (
        "group b (affinity): its 2 members need one rack that holds them all (VCPU 5 in "
        "total); 1 rack with that room cannot take them (source-hosts: 5 -> 4)")


def test_a_unit_finds_its_rack_among_many_full_ones():
    # Forty empty single-host racks too small for the unit come first by weight;
    # past them the two big racks are ranked by their best host.
    snapshot = fleet(host("big-a", rack="ra", vcpu=16, used={"VCPU": 2}),
                     host("big-b", rack="rb", vcpu=16, used={"VCPU": 8}),
                     *[host(f"s{i:02d}", rack=f"k{i:02d}", vcpu=4) for i in range(40)])
    group = GroupSpec(id="np", policies=["network-proximity"])
    result = place_moves([server(f"m{i}", vcpu=3, group=group) for i in range(2)], snapshot)
    assert set(primaries(result).values()) == {"big-a"}


def test_soft_policies_do_not_filter():
    group = GroupSpec(id="soft", policies=["soft-affinity"], member_hosts=["a"])
    snapshot = fleet(host("a", vcpu=1), host("b"))
    result = place_moves([server("m0", group=group), server("m1", group=group)], snapshot)
    assert not result.unplaced and len(set(primaries(result).values())) == 2


# -- backends and capabilities ---------------------------------------------------------


def test_backends_needed_keep_volumes_reachable():
    snapshot = fleet(host("a"), host("b"), host("c"))
    result = place_moves([
        server("both", backends_needed=[["a", "b"], ["b", "c", "src"]]),
        server("apart", backends_needed=[["a"], ["c"]]),
        server("free")], snapshot)
    assert result.candidates["both"] == ["b"]
    assert result.unplaced == {"apart": "no host fits: source-hosts: 4 -> 3, backends: 3 -> 0"}
    assert primaries(result)["free"] in {"a", "c"}


def test_capabilities_filter_and_explanation():
    snapshot = fleet(host("a", capabilities={"gpu": True}), host("b"), host("c"))
    result = place_moves([server("g", capabilities={"gpu": "true"}),
                          server("ssd", capabilities={"disk": "ssd"})], snapshot)
    assert result.candidates["g"] == ["a"]
    assert result.unplaced == {"ssd": "no host fits: source-hosts: 4 -> 3, "
                                      "capabilities: 3 -> 0"}
    group = GroupSpec(id="hc", policies=["host-capabilities"], capabilities={"gpu": "true"})
    result = place_moves([server("m", group=group)], snapshot)
    assert result.candidates["m"] == ["a"]


# -- alternates, determinism, result ---------------------------------------------------


def test_alternates_fit_given_every_primary_and_keep_the_group_rule():
    group = GroupSpec(id="g", policies=["anti-affinity"], member_hosts=["e"])
    snapshot = fleet(host("a", vcpu=2), host("b"), host("c"), host("d"), host("e"))
    servers = [server("m0", vcpu=2, group=group), server("m1", vcpu=2, group=group),
               server("fill", vcpu=2)]
    result = place_moves(servers, snapshot, alternates=4)
    # fill goes first (ties by key) and fills a, so a is nobody's alternate; the
    # members' alternates avoid each other's host and the member staying on e.
    assert result.candidates == {"m0": ["b", "d"], "m1": ["c", "d"],
                                 "fill": ["a", "d", "e", "b", "c"]}
    assert place_moves(servers, snapshot, alternates=0).candidates["m0"] == ["b"]


def test_alternates_rotate_over_the_candidates():
    snapshot = fleet(*[host(f"h{i}", vcpu=64) for i in range(8)])
    result = place_moves([server(f"s{i}") for i in range(3)], snapshot, alternates=2)
    assert result.candidates == {"s0": ["h0", "h3", "h4"], "s1": ["h1", "h5", "h6"],
                                 "s2": ["h2", "h7", "h0"]}


def test_same_input_same_result_whatever_the_order():
    rng = random.Random(7)
    hosts = [host(f"h{i:02d}", vcpu=rng.choice([8, 16]), rack=f"r{i % 3}",
                  used={"VCPU": rng.randint(0, 4)}) for i in range(20)]
    anti = GroupSpec(id="anti", policies=["anti-affinity"], scope="rack", max_per_host=3)
    aff = GroupSpec(id="aff", policies=["network-proximity"])
    servers = [server(f"s{i:02d}", vcpu=rng.choice([1, 2, 4]),
                      group=rng.choice([None, None, anti, aff])) for i in range(30)]
    first = place_moves(servers, fleet(*hosts)).to_dict()
    again = place_moves(list(reversed(servers)), fleet(*reversed(hosts))).to_dict()
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert list(first["candidates"]) == [s.key for s in servers if s.key in first["candidates"]]


def test_result_and_servers_round_trip_through_json():
    group = GroupSpec(id="g", policies=["anti-affinity"])
    servers = [server("a", group=group, backends_needed=[["h1", "h2"]]), server("b", vcpu=99)]
    again = [ServerToMove.from_dict(json.loads(json.dumps(s.to_dict()))) for s in servers]
    assert again == servers
    result = place_moves(again, fleet(host("h1"), host("h2")))
    data = json.loads(json.dumps(result.to_dict()))
    assert MovePlacement.from_dict(data) == result
    assert data["host_uuids"] == {"h1": "u-h1", "h2": "u-h2"}
    assert result.host_of("a") == "h1" and result.host_of("b") is None
    assert set(data["unplaced"]) == {"b"}


# -- property ----------------------------------------------------------------------------

GROUPS = [(["anti-affinity"], "host"), (["anti-affinity"], "rack"), (["affinity"], "host"),
          (["affinity"], "rack"), (["affinity"], "zone"), (["network-proximity"], "host"),
          (["network-proximity", "anti-affinity"], "host"), (["soft-anti-affinity"], "host")]


@st.composite
def passes(draw):
    count = draw(st.integers(0, 10))
    hosts = []
    for i in range(count):
        vcpu, mem = draw(st.integers(0, 8)), draw(st.integers(0, 4))
        hosts.append(HostState(
            f"h{i}", uuid=f"u{i}", state=draw(st.sampled_from(["up"] * 5 + ["down"])),
            region="na", zone=f"z{draw(st.integers(0, 1))}", rack=f"r{draw(st.integers(0, 1))}",
            capabilities={"color": draw(st.sampled_from(["blue", "red"]))},
            capacity={"VCPU": vcpu, "MEMORY_MB": mem},
            used={"VCPU": draw(st.integers(0, vcpu)), "MEMORY_MB": draw(st.integers(0, mem))}))
    snapshot = CloudSnapshot(hosts)
    names = [h.name for h in hosts]
    pick_host = st.sampled_from([*names, "gone"])
    groups = []
    for g in range(draw(st.integers(0, 3))):
        policies, scope = draw(st.sampled_from(GROUPS))
        groups.append(GroupSpec(id=f"g{g}", policies=policies, scope=scope,
                                max_per_host=draw(st.sampled_from([None, 2])),
                                member_hosts=draw(st.lists(st.sampled_from(names), max_size=2))
                                if names else []))
    servers = []
    for i in range(draw(st.integers(1, 12))):
        # Few hosts are emptied at once, so most of the fleet stays a destination.
        source = draw(st.sampled_from([*names[:2], "gone"]))
        servers.append(ServerToMove(
            f"s{i}", source, {"VCPU": draw(st.integers(0, 3)),
                              "MEMORY_MB": draw(st.sampled_from([0, 0, 1]))},
            capabilities=draw(st.sampled_from([{}, {}, {"color": "blue"}])),
            group=draw(st.sampled_from([None, *groups, *groups])),
            backends_needed=draw(st.one_of(st.just([]), st.lists(st.lists(pick_host, max_size=8),
                                                                  max_size=2)))))
    options = {"excluded_hosts": draw(st.lists(pick_host, max_size=1)),
               "target_hosts": draw(st.one_of(st.none(), st.none(),
                                              st.lists(pick_host, max_size=8))),
               "alternates": draw(st.integers(0, 3)),
               "weigher": draw(st.sampled_from(["spread", "pack"]))}
    return snapshot, servers, options


def affinity_scopes(group):
    scopes = []
    if "affinity" in group.policies:
        scopes.append(group.scope)
    if "network-proximity" in group.policies:
        scopes.append("rack")
    return scopes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=passes())
@pytest.mark.slow
def test_placements_respect_capacity_exclusions_and_groups(case):
    snapshot, servers, options = case
    result = place_moves(servers, snapshot, **options)
    by_name = snapshot.by_name
    assert set(result.candidates) | set(result.unplaced) == {s.key for s in servers}
    assert not set(result.candidates) & set(result.unplaced)
    sources = {s.source for s in servers}
    blocked = set(options["excluded_hosts"])
    targets = options["target_hosts"]

    def allowed(name, item):
        h = by_name[name]
        return (h.state == "up" and name not in sources and name not in blocked
                and (not targets or name in targets)
                and (not item.capabilities or h.capabilities["color"] == "blue")
                and all(name in hosts for hosts in item.backends_needed))

    placed = {key: hosts[0] for key, hosts in result.candidates.items()}
    final = {name: Counter(h.used) for name, h in by_name.items()}
    for item in servers:
        if item.key in placed:
            assert allowed(placed[item.key], item)
            final[placed[item.key]].update(item.resources)
    for name in set(placed.values()):
        assert all(final[name][rc] <= by_name[name].capacity.get(rc, 0)
                   for rc in ("VCPU", "MEMORY_MB"))

    def fits(name, item):
        return all(final[name][rc] + n <= by_name[name].capacity.get(rc, 0)
                   for rc, n in item.resources.items())

    def check_groups(hosts_of):
        members = defaultdict(list)
        for item in servers:
            if item.group is not None and item.key in hosts_of:
                members[item.group.id].append(hosts_of[item.key])
        for group in {s.group.id: s.group for s in servers if s.group}.values():
            moved = members[group.id]
            if "anti-affinity" in group.policies:
                limit = group.max_per_host or 1
                counts = Counter(by_name[h].domain(group.scope)
                                 for h in [*group.member_hosts, *moved])
                assert all(counts[by_name[h].domain(group.scope)] <= limit for h in moved)
            for scope in affinity_scopes(group):
                domains = {by_name[h].domain(scope) for h in moved}
                assert len(domains) <= 1
                if group.member_hosts:
                    assert domains <= {by_name[h].domain(scope) for h in group.member_hosts}

    check_groups(placed)
    for group in {s.group.id: s.group for s in servers if s.group}.values():
        if affinity_scopes(group):
            keys = [s.key for s in servers if s.group is group]
            assert all(k in placed for k in keys) or not any(k in placed for k in keys)
            assert all(result.unplaced[k].startswith(f"group {group.id} ")
                       for k in keys if k in result.unplaced)

    for item in servers:
        if item.key not in placed:
            continue
        primary, *others = result.candidates[item.key]
        assert primary not in others and len(set(others)) == len(others)
        assert len(others) <= options["alternates"]
        for alternate in others:
            assert allowed(alternate, item) and fits(alternate, item)
            check_groups({**placed, item.key: alternate})

    # A single server without a limiting group is left out only if nothing fits it,
    # even with everything else placed.
    for item in servers:
        if item.key in result.unplaced and (
                item.group is None or not ({"affinity", "anti-affinity",
                                             "network-proximity"} & set(item.group.policies))):
            assert not any(allowed(name, item) and fits(name, item) for name in by_name)
            assert result.unplaced[item.key].startswith("no host fits: ")
