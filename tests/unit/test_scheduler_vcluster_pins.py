"""Updating a virtual cluster: new members placed jointly with pinned (existing) ones.

Pinned members stay where they are, take part in every grouping, are not
counted twice against capacity, hold their domains on a down host, appear
in the answer without alternates; contradictions among them are explained
and bad pins are InvalidInput.
"""

import json
import time

import pytest

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import CloudSnapshot
from fleetflow.scheduler.vcluster.place import (
    Grouping,
    place_vcluster,
)

# The same small clouds and members as the fresh-placement tests.
from fleetflow.tests.unit.test_scheduler_vcluster import cloud, host, local, shared, srv, vol


def rack_of(snapshot, host_name):
    return snapshot.by_name[host_name].rack


# -- pinned members bind the new ones --------------------------------------------------------


def test_a_new_volume_affine_with_a_pinned_server_lands_where_its_host_reaches():
    snapshot, backends = cloud(racks=3)
    backends.append(local("h011", rack="r1"))
    groupings = [Grouping("g", ["web", "data"], "affinity")]
    # Unpinned, web would go to h000 (first by name); pinned on h010, its rack's backend.
    result = place_vcluster([srv("web")], [vol("data")], groupings, snapshot, backends,
                            pinned_hosts={"web": "h010"})
    assert result.fits
    assert result.hosts == {"web": ["h010"]}
    assert result.backends == {"data": ["rb-z0-r1"]}  # lb-h011 is h011's own disk only
    assert result.attachments == {"data": "web"}
    assert result.domains == {"g": {"web": "h010", "data": "rb-z0-r1"}}
    # On a host with a disk of its own, the volume takes that disk first.
    result = place_vcluster([srv("web")], [vol("data")], groupings, snapshot, backends,
                            pinned_hosts={"web": "h011"})
    assert result.backends == {"data": ["lb-h011", "rb-z0-r1"]}


def test_a_new_server_affine_with_a_pinned_volume_goes_where_it_reaches_that_volume():
    snapshot = CloudSnapshot([host("h0"), host("h1"), host("h2", rack="r1")])
    backends = [shared("r0"), shared("r1"), local("h1")]
    # On h1's own disk: only h1 reaches it.
    result = place_vcluster([srv("s")], [vol("v"), vol("w")],
                            [Grouping("g", ["s", "v", "w"], "affinity")], snapshot, backends,
                            pinned_backends={"v": "lb-h1"})
    assert (result.hosts, result.backends) == ({"s": ["h1"]}, {"v": ["lb-h1"], "w": ["lb-h1"]})
    # On rack r1's backend: a host of r1, attached.
    result = place_vcluster([srv("s")], [vol("v", attach_to="s")], [], snapshot, backends,
                            pinned_backends={"v": "rb-z0-r1"}, alternates=3)
    assert result.hosts == {"s": ["h2"]} and result.backends == {"v": ["rb-z0-r1"]}
    # No host of the pinned volume's rack is up: explained by the pinned member.
    snapshot = CloudSnapshot([host("h0"), host("h1"), host("h2", rack="r1", state="down")])
    result = place_vcluster([srv("s")], [vol("v", attach_to="s")], [], snapshot, backends,
                            pinned_backends={"v": "rb-z0-r1"})
    assert not result.fits
    assert result.explanation == ("server s: state: 3 hosts -> 2, rack of pinned v: "
                                  "2 hosts -> 0")


def test_new_servers_avoid_the_hosts_and_racks_of_pinned_anti_affine_ones():
    snapshot, backends = cloud(racks=3, per_rack=3)
    servers = [srv("a"), srv("b"), srv("c"), srv("d")]
    groupings = [Grouping("apart", ["a", "b", "c", "d"], "anti-affinity")]
    result = place_vcluster(servers, [], groupings, snapshot, backends, alternates=5,
                            pinned_hosts={"a": "h000", "b": "h001"})
    assert result.fits
    assert result.hosts["a"] == ["h000"] and result.hosts["b"] == ["h001"]
    taken = {"h000", "h001"}
    for name in "cd":
        assert not taken & set(result.hosts[name])  # alternates too
        taken.add(result.host_of(name))
    assert len(taken) == 4
    # At rack scope, the pinned ones' rack is out for the new one and its alternates.
    groupings = [Grouping("apart", ["a", "c"], "anti-affinity", "rack")]
    result = place_vcluster(servers[:3], [], groupings, snapshot, backends, alternates=5,
                            pinned_hosts={"a": "h000"})
    assert {rack_of(snapshot, h) for h in result.hosts["c"]} <= {"r1", "r2"}
    assert result.domains == {"apart": {"a": "na/z0/r0", "c": result.domains["apart"]["c"]}}
    assert result.domains["apart"]["c"] != "na/z0/r0"


def test_new_volumes_avoid_pinned_anti_affine_ones():
    snapshot, backends = cloud(racks=3)
    groupings = [Grouping("apart", ["old", "new"], "anti-affinity")]
    result = place_vcluster([], [vol("old"), vol("new")], groupings, snapshot, backends,
                            alternates=3, pinned_backends={"old": "rb-z0-r0"})
    assert result.backends["old"] == ["rb-z0-r0"]
    assert "rb-z0-r0" not in result.backends["new"] and len(result.backends["new"]) == 2


def test_a_new_server_joins_the_host_of_a_pinned_host_affine_one():
    snapshot, backends = cloud(racks=2)
    groupings = [Grouping("g", ["a", "b", "c"], "affinity")]
    result = place_vcluster([srv("a"), srv("b"), srv("c")], [], groupings, snapshot, backends,
                            pinned_hosts={"a": "h011"}, alternates=3)
    assert result.hosts == {"a": ["h011"], "b": ["h011"], "c": ["h011"]}


# -- capacity: pinned members are already counted --------------------------------------------


def test_a_full_host_still_holds_its_pinned_server_and_only_new_members_need_room():
    # h0 is full with the pinned server's own 8 VCPU; h1 has 1 free.
    snapshot = CloudSnapshot([host("h0", used={"VCPU": 8}), host("h1", used={"VCPU": 7})])
    result = place_vcluster([srv("a", 8), srv("b", 1)], [],
                            [Grouping("g", ["a", "b"], "affinity", "rack")], snapshot, [],
                            pinned_hosts={"a": "h0"})
    assert result.fits and result.hosts == {"a": ["h0"], "b": ["h1"]}
    # Sharing the full host is another matter: the new server needs room there.
    result = place_vcluster([srv("a", 8), srv("b", 1)], [],
                            [Grouping("g", ["a", "b"], "affinity")], snapshot, [],
                            pinned_hosts={"a": "h0"})
    assert not result.fits
    assert result.explanation == "server b: host h0 of pinned a: resources (VCPU): 1 hosts -> 0"
    # Nothing new at all: the full host holds the whole cluster as it is.
    result = place_vcluster([srv("a", 8)], [], [], snapshot, [], pinned_hosts={"a": "h0"})
    assert result.fits and result.hosts == {"a": ["h0"]}


def test_a_full_backend_still_holds_its_pinned_volume():
    snapshot = CloudSnapshot([host("h0")])
    backends = [shared("r0", gb=100, used=100), shared("r1", gb=100)]
    volumes = [vol("old", 100), vol("new", 50)]
    result = place_vcluster([], volumes, [], snapshot, backends,
                            pinned_backends={"old": "rb-z0-r0"})
    assert result.backends == {"old": ["rb-z0-r0"], "new": ["rb-z0-r1"]}
    # Affine: the new volume needs its own 50 GB on the pinned one's backend, no more.
    backends = [shared("r0", gb=160, used=100), shared("r1", gb=100)]
    groupings = [Grouping("g", ["old", "new"], "affinity")]
    result = place_vcluster([], volumes, groupings, snapshot, backends,
                            pinned_backends={"old": "rb-z0-r0"})
    assert result.backends == {"old": ["rb-z0-r0"], "new": ["rb-z0-r0"]}
    backends[0].used_gb = 120
    result = place_vcluster([], volumes, groupings, snapshot, backends,
                            pinned_backends={"old": "rb-z0-r0"})
    assert result.explanation == ("volume new: backend rb-z0-r0 of pinned old: "
                                  "capacity: 1 backends -> 0")


# -- down hosts -------------------------------------------------------------------------------


def test_a_pinned_server_on_a_down_host_keeps_its_domains_but_takes_no_one_new():
    snapshot = CloudSnapshot([host("h0", state="down"), host("h1"), host("h2", rack="r1")])
    backends = [shared("r0"), shared("r1")]
    # Anti-affinity by rack holds against the down host's rack.
    result = place_vcluster([srv("a"), srv("b")], [],
                            [Grouping("g", ["a", "b"], "anti-affinity", "rack")], snapshot,
                            backends, pinned_hosts={"a": "h0"}, alternates=2)
    assert result.hosts == {"a": ["h0"], "b": ["h2"]}
    assert result.domains == {"g": {"a": "na/z0/r0", "b": "na/z0/r1"}}
    # Rack affinity: the new server goes to an up host of that rack.
    result = place_vcluster([srv("a"), srv("b")], [],
                            [Grouping("g", ["a", "b"], "affinity", "rack")], snapshot,
                            backends, pinned_hosts={"a": "h0"})
    assert result.hosts == {"a": ["h0"], "b": ["h1"]}
    # Host affinity: the new server would have to go to the down host.
    result = place_vcluster([srv("a"), srv("b")], [], [Grouping("g", ["a", "b"], "affinity")],
                            snapshot, backends, pinned_hosts={"a": "h0"})
    assert not result.fits
    assert result.explanation == "server b: host h0 of pinned a: state down: 1 hosts -> 0"


# -- contradictions among pinned members ----------------------------------------------------------


@pytest.mark.parametrize("servers, volumes, groupings, hosts, backends, explanation", [
    ([srv("a"), srv("b"), srv("c")], [], [Grouping("g", ["a", "b", "c"], "affinity")],
     {"a": "h000", "b": "h010"}, {},
     "grouping g (affinity, host): pinned a (h000) and b (h010) are in different hosts"),
    ([srv("a"), srv("b")], [], [Grouping("g", ["a", "b"], "affinity", "rack")],
     {"a": "h000", "b": "h010"}, {},
     "grouping g (affinity, rack): pinned a (na/z0/r0) and b (na/z0/r1) are in different "
     "racks"),
    ([srv("a"), srv("b")], [], [Grouping("apart", ["a", "b"], "anti-affinity")],
     {"a": "h000", "b": "h000"}, {},
     "grouping apart (anti-affinity, host): pinned a and b share host h000"),
    ([srv("a")], [vol("v"), vol("w")], [Grouping("apart", ["v", "w"], "anti-affinity")],
     {}, {"v": "rb-z0-r0", "w": "rb-z0-r0"},
     "grouping apart (anti-affinity, rack): pinned v and w share rack na/z0/r0"),
    ([srv("a")], [vol("v")], [Grouping("apart", ["a", "v"], "anti-affinity")],
     {"a": "h000"}, {"v": "rb-z0-r0"},
     "grouping apart (anti-affinity, rack): pinned a and v share rack na/z0/r0"),
    ([srv("a")], [vol("v", attach_to="a")], [], {"a": "h000"}, {"v": "rb-z0-r1"},
     "attachment: pinned v on rb-z0-r1 is out of reach of pinned a on h000"),
    ([srv("a"), srv("n")], [vol("v"), vol("w")],
     [Grouping("gv", ["v", "w"], "affinity"), Grouping("new", ["n", "w"], "affinity")],
     {}, {"v": "rb-z0-r0", "w": "rb-z0-r1"},
     "grouping gv (affinity, backend): pinned v (rb-z0-r0) and w (rb-z0-r1) are in "
     "different backends"),
])
def test_pinned_members_that_break_a_grouping_are_explained(servers, volumes, groupings, hosts,
                                                            backends, explanation):
    result = place_vcluster(servers, volumes, groupings, *cloud(racks=2), pinned_hosts=hosts,
                            pinned_backends=backends)
    assert not result.fits and result.explanation == explanation
    assert (result.hosts, result.backends, result.domains) == ({}, {}, {})


def test_a_pinned_volume_out_of_reach_of_its_pinned_server_is_explained():
    snapshot = CloudSnapshot([host("h0"), host("h1")])
    backends = [shared("r0"), local("h1")]
    result = place_vcluster([srv("a")], [vol("v")], [Grouping("g", ["a", "v"], "affinity")],
                            snapshot, backends, pinned_hosts={"a": "h0"},
                            pinned_backends={"v": "lb-h1"})
    assert result.explanation == "grouping g (affinity): pinned v on lb-h1 is out of reach " \
                                 "of pinned a on h0"


# -- bad pins ---------------------------------------------------------------------------------


@pytest.mark.parametrize("pins, words", [
    ({"pinned_hosts": {"x": "h000"}}, "pinned_hosts: 'x' is not a server of the cluster"),
    ({"pinned_hosts": {"v": "h000"}}, "pinned_hosts: 'v' is not a server of the cluster"),
    ({"pinned_hosts": {"a": "nowhere"}}, "pinned_hosts: server a: no host 'nowhere'"),
    ({"pinned_backends": {"a": "rb-z0-r0"}},
     "pinned_backends: 'a' is not a volume of the cluster"),
    ({"pinned_backends": {"v": "nothing"}}, "pinned_backends: volume v: no backend 'nothing'"),
])
def test_bad_pins_are_invalid_input(pins, words):
    with pytest.raises(InvalidInput) as caught:
        place_vcluster([srv("a")], [vol("v")], [], *cloud(), **pins)
    assert caught.value.details["field"] == "instances"
    assert caught.value.message == words


# -- the answer --------------------------------------------------------------------------------


def test_no_pins_is_the_pass_of_before_and_pins_are_deterministic():
    snapshot, backends = cloud(racks=4, per_rack=3, zones=2)
    servers = [srv(f"s{i}", 1 + i % 3) for i in range(12)]
    volumes = [vol(f"v{i}", 10 * (1 + i % 4)) for i in range(12)]
    groupings = [Grouping(f"a{i}", [f"s{i}", f"v{i}"], "affinity") for i in range(0, 12, 2)]
    groupings += [Grouping("sa", [f"s{i}" for i in range(6)], "anti-affinity", "rack"),
                  Grouping("va", [f"v{i}" for i in range(6, 12)], "anti-affinity")]
    first = place_vcluster(servers, volumes, groupings, snapshot, backends)
    assert place_vcluster(servers, volumes, groupings, snapshot, backends, pinned_hosts={},
                          pinned_backends={}) == first
    # The first six of each pinned where the pass put them, their usage counted.
    pinned_hosts = {f"s{i}": first.host_of(f"s{i}") for i in range(6)}
    pinned_backends = {f"v{i}": first.backend_of(f"v{i}") for i in range(6)}
    for name, where in pinned_hosts.items():
        snapshot.add_usage(where, servers[int(name[1:])].resources)
    by_name = {b.name: b for b in backends}
    for name, where in pinned_backends.items():
        by_name[where].used_gb += volumes[int(name[1:])].size_gb
    answers = {json.dumps(place_vcluster(
        servers, volumes, groupings, snapshot, backends,
        pinned_hosts=dict(order(pinned_hosts.items())),
        pinned_backends=dict(order(pinned_backends.items()))).to_dict(), sort_keys=True)
        for order in (list, reversed, list)}
    assert len(answers) == 1
    result = json.loads(answers.pop())
    assert result["fits"]
    for name, where in pinned_hosts.items():
        assert result["hosts"][name] == [where]
    for name, where in pinned_backends.items():
        assert result["backends"][name] == [where]
    racks = [result["domains"]["sa"][f"s{i}"] for i in range(6)]
    assert len(set(racks)) == 6


def test_alternates_of_new_members_respect_the_pinned_ones():
    snapshot, backends = cloud(racks=3, per_rack=3)
    groupings = [Grouping("apart", ["a", "b", "c"], "anti-affinity", "rack"),
                 Grouping("ga", ["a", "va"], "affinity")]
    result = place_vcluster([srv("a"), srv("b"), srv("c")], [vol("va")], groupings, snapshot,
                            backends, alternates=5, pinned_hosts={"b": "h010", "c": "h020"})
    assert result.hosts["b"] == ["h010"] and result.hosts["c"] == ["h020"]
    # a is left rack r0 and stays there with its alternates; its volume is r0's backend.
    assert {rack_of(snapshot, h) for h in result.hosts["a"]} == {"r0"}
    assert len(result.hosts["a"]) == 3 and result.backends["va"] == ["rb-z0-r0"]
    # Pinned with its volume: the new server's alternates must reach the pinned volume.
    result = place_vcluster([srv("a")], [vol("va")], [groupings[1]], snapshot, backends,
                            alternates=5, pinned_backends={"va": "rb-z0-r2"})
    assert {rack_of(snapshot, h) for h in result.hosts["a"]} == {"r2"}
    assert len(result.hosts["a"]) == 3 and result.backends["va"] == ["rb-z0-r2"]


def test_a_large_update_stays_fast():
    hosts = [host(f"h{i:04d}", rack=f"r{i // 16:03d}", zone=f"z{i // 320}", vcpu=32)
             for i in range(1600)]
    backends = [shared(f"r{r:03d}", zone=f"z{r * 16 // 320}", gb=100000) for r in range(100)]
    servers = [srv(f"s{i:03d}", 2) for i in range(400)]
    volumes = [vol(f"v{i:03d}", 100, "ssd") for i in range(400)]
    groupings = [Grouping(f"a{i}", [f"s{i:03d}", f"v{i:03d}"], "affinity") for i in range(400)]
    for k in range(40):
        groupings.append(Grouping(f"sa{k}", [f"s{k * 10 + j:03d}" for j in range(10)],
                                  "anti-affinity"))
        groupings.append(Grouping(f"va{k}", [f"v{k * 10 + j:03d}" for j in range(10)],
                                  "anti-affinity"))
    snapshot = CloudSnapshot(hosts)
    first = place_vcluster(servers[:200], volumes[:200], groupings[:200] + [
        g for g in groupings[400:] if int(g.members[0][1:]) < 200], snapshot, backends)
    assert first.fits
    for candidates in first.hosts.values():
        snapshot.add_usage(candidates[0], {"VCPU": 2})
    by_name = {b.name: b for b in backends}
    for candidates in first.backends.values():
        by_name[candidates[0]].used_gb += 100
    start = time.process_time()
    result = place_vcluster(servers, volumes, groupings, snapshot, backends,
                            pinned_hosts={s: c[0] for s, c in first.hosts.items()},
                            pinned_backends={v: c[0] for v, c in first.backends.items()})
    assert result.fits and time.process_time() - start < 5
    for name, candidates in first.hosts.items():
        assert result.hosts[name] == candidates[:1]
    for k in range(40):
        members = groupings[400 + 2 * k].members
        assert len({result.host_of(m) for m in members}) == len(members)


def test_a_new_volume_of_a_type_its_pinned_server_cannot_reach_is_explained():
    snapshot = CloudSnapshot([host("h0"), host("h1", rack="r1")])
    backends = [shared("r0", types=("hdd",)), shared("r1", types=("ssd",))]
    result = place_vcluster([srv("a")], [vol("v", vtype="ssd", attach_to="a")], [], snapshot,
                            backends, pinned_hosts={"a": "h0"})
    assert not result.fits
    assert result.explanation == "host h0 of pinned a: reaches volume_type ssd: 1 hosts -> 0"
    result = place_vcluster([srv("a")], [vol("v", vtype="hdd", attach_to="a")], [], snapshot,
                            backends, pinned_hosts={"a": "h0"})
    assert result.backends == {"v": ["rb-z0-r0"]} and result.attachments == {"v": "a"}
