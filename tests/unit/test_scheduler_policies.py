"""Group policies: affinity, anti-affinity, soft policies, network proximity, scopes."""

from collections import Counter

import pytest

from fleetflow.scheduler import CloudSnapshot, GroupSpec, HostState, NoValidHost, RequestSpec
from fleetflow.scheduler import schedule as run


def cloud(zones=2, racks=2, hosts=3, vcpus=8):
    """zones x racks x hosts, named z<Z>-r<R>-h<H>; racks named alike in every zone."""
    return CloudSnapshot(
        HostState(f"z{z}-r{r}-h{h}", uuid=f"u-{z}{r}{h}", region="na", zone=f"z{z}",
                  rack=f"r{r}", capacity={"VCPU": vcpus})
        for z in range(zones) for r in range(racks) for h in range(hosts))


def place(count, snapshot=None, alternates=0, **group):
    spec = RequestSpec(count=count, resources={"VCPU": 1}, group=GroupSpec(**group))
    return run(spec, snapshot or cloud(), alternates=alternates)


def hosts_of(placement):
    return [p.host for p in placement.instances]


def rack(name):
    return name.rsplit("-", 1)[0]


def zone(name):
    return name.split("-")[0]


def test_anti_affinity_host_scope_uses_distinct_hosts():
    placement = place(12, policies=["anti-affinity"])
    assert len(set(hosts_of(placement))) == 12
    with pytest.raises(NoValidHost) as err:
        place(13, policies=["anti-affinity"])
    assert "anti-affinity: 12 -> 0" in str(err.value)


def test_anti_affinity_honours_existing_members():
    members = ["z0-r0-h0", "z0-r0-h1"]
    placement = place(10, policies=["anti-affinity"], member_hosts=members)
    assert not set(hosts_of(placement)) & set(members)
    with pytest.raises(NoValidHost) as err:
        place(11, policies=["anti-affinity"], member_hosts=members)
    assert str(err.value).endswith("anti-affinity: 12 -> 0")


def test_anti_affinity_max_per_host():
    placement = place(24, policies=["anti-affinity"], max_per_host=2)
    assert max(Counter(hosts_of(placement)).values()) == 2
    placement = place(23, policies=["anti-affinity"], max_per_host=2, member_hosts=["z0-r0-h0"])
    counts = Counter(hosts_of(placement))
    assert counts["z0-r0-h0"] == 1 and max(counts.values()) == 2
    with pytest.raises(NoValidHost):
        place(24, policies=["anti-affinity"], max_per_host=2, member_hosts=["z0-r0-h0"])


def test_anti_affinity_rack_scope():
    placement = place(4, policies=["anti-affinity"], scope="rack")
    assert len({rack(h) for h in hosts_of(placement)}) == 4
    with pytest.raises(NoValidHost):
        place(4, policies=["anti-affinity"], scope="rack", member_hosts=["z1-r1-h2"])
    # max_per_host counts per rack at rack scope.
    placement = place(8, policies=["anti-affinity"], scope="rack", max_per_host=2)
    assert set(Counter(rack(h) for h in hosts_of(placement)).values()) == {2}


def test_anti_affinity_zone_scope_and_same_named_racks():
    placement = place(2, policies=["anti-affinity"], scope="zone")
    assert {zone(h) for h in hosts_of(placement)} == {"z0", "z1"}
    # Rack r0 of zone z0 is not rack r0 of zone z1.
    placement = place(3, policies=["anti-affinity"], scope="rack",
                      member_hosts=["z0-r0-h0"])
    assert "z0-r0" not in {rack(h) for h in hosts_of(placement)}
    assert "z1-r0" in {rack(h) for h in hosts_of(placement)}


def test_affinity_host_scope_puts_everyone_on_one_host():
    placement = place(8, policies=["affinity"])
    assert len(set(hosts_of(placement))) == 1
    with pytest.raises(NoValidHost) as err:
        place(9, policies=["affinity"])
    assert "no host holds 9; the largest holds 8" in str(err.value)


def test_affinity_follows_existing_members():
    placement = place(5, policies=["affinity"], member_hosts=["z1-r0-h2"])
    assert set(hosts_of(placement)) == {"z1-r0-h2"}
    placement = place(10, policies=["affinity"], scope="rack", member_hosts=["z1-r1-h0"])
    assert {rack(h) for h in hosts_of(placement)} == {"z1-r1"}
    with pytest.raises(NoValidHost) as err:
        place(1, policies=["affinity"], member_hosts=["gone-host"])
    assert "affinity: 12 -> 0" in str(err.value)


def test_affinity_zone_scope_spreads_inside_the_zone():
    placement = place(6, policies=["affinity"], scope="zone")
    hosts = hosts_of(placement)
    assert len({zone(h) for h in hosts}) == 1 and len(set(hosts)) == 6


def test_affinity_prefers_a_domain_that_holds_everyone():
    snapshot = cloud(zones=1, racks=2, hosts=1)
    snapshot.by_name["z0-r0-h0"].used = {"VCPU": 6}  # the spread weigher would pick r1 anyway
    snapshot.by_name["z0-r1-h0"].used = {"VCPU": 1}
    placement = place(5, snapshot, policies=["affinity"])
    assert set(hosts_of(placement)) == {"z0-r1-h0"}


def test_network_proximity_is_rack_affinity_and_combines_with_anti_affinity():
    placement = place(3, policies=["network-proximity", "anti-affinity"])
    hosts = hosts_of(placement)
    assert len({rack(h) for h in hosts}) == 1 and len(set(hosts)) == 3
    with pytest.raises(NoValidHost) as err:
        place(4, policies=["network-proximity", "anti-affinity"])
    assert "network-proximity: 12 -> 0" in str(err.value)
    placement = place(2, policies=["network-proximity"], member_hosts=["z1-r0-h1"])
    assert {rack(h) for h in hosts_of(placement)} == {"z1-r0"}


def test_soft_anti_affinity_spreads_over_racks_then_doubles_up():
    placement = place(6, policies=["soft-anti-affinity"], scope="rack")
    counts = Counter(rack(h) for h in hosts_of(placement))
    assert sorted(counts.values()) == [1, 1, 2, 2]
    # Existing members' racks are avoided while others are free.
    placement = place(3, policies=["soft-anti-affinity"], scope="rack",
                      member_hosts=["z0-r0-h0"])
    assert "z0-r0" not in {rack(h) for h in hosts_of(placement)}
    # Never a filter: more instances than hosts still fit.
    assert len(place(20, policies=["soft-anti-affinity"]).instances) == 20


def test_soft_affinity_gathers_then_overflows():
    snapshot = cloud(zones=1, racks=1, hosts=3, vcpus=4)
    placement = place(6, snapshot, policies=["soft-affinity"])
    counts = Counter(hosts_of(placement))
    assert sorted(counts.values()) == [2, 4]
    placement = place(2, policies=["soft-affinity"], member_hosts=["z1-r1-h1"])
    assert set(hosts_of(placement)) == {"z1-r1-h1"}


def test_policy_alternates_keep_the_rule():
    placement = place(4, policies=["anti-affinity"], alternates=3)
    primaries = set(hosts_of(placement))
    for item in placement.instances:
        assert len(item.alternates) == 3
        assert not set(item.alternates) & primaries
    placement = place(4, policies=["affinity"], alternates=2)
    assert all(item.alternates == [] for item in placement.instances)
    placement = place(2, policies=["affinity"], scope="rack", alternates=2)
    for item in placement.instances:
        assert item.alternates and {rack(a) for a in item.alternates} == {rack(item.host)}


def test_rack_anti_affinity_alternates_stay_in_own_rack_when_others_are_taken():
    placement = place(4, policies=["anti-affinity"], scope="rack", alternates=2)
    for item in placement.instances:
        assert len(item.alternates) == 2
        assert {rack(a) for a in item.alternates} == {rack(item.host)}


def test_affinity_and_network_proximity_choose_the_finer_domain():
    placement = place(5, policies=["affinity", "network-proximity"], scope="zone")
    hosts = hosts_of(placement)
    assert len({rack(h) for h in hosts}) == 1 and len(set(hosts)) == 3
    placement = place(5, policies=["affinity", "network-proximity"], scope="host")
    assert len(set(hosts_of(placement))) == 1


def test_a_database_group_anti_affine_on_hosts_with_capabilities():
    snapshot = cloud()
    for name in ("z0-r1-h0", "z0-r1-h2", "z1-r0-h1"):
        snapshot.by_name[name].capabilities["disk"] = "ssd"
    placement = place(3, snapshot, policies=["anti-affinity", "host-capabilities"],
                      capabilities={"disk": "ssd"})
    assert sorted(hosts_of(placement)) == ["z0-r1-h0", "z0-r1-h2", "z1-r0-h1"]
    with pytest.raises(NoValidHost) as err:
        place(4, snapshot, policies=["anti-affinity", "host-capabilities"],
              capabilities={"disk": "ssd"})
    assert str(err.value).endswith("host-capabilities: 12 -> 3; anti-affinity: 3 -> 0")


def test_evacuation_excludes_the_source_and_keeps_anti_affinity():
    # The evacuated instance's own membership is left out of member_hosts by the caller.
    spec = RequestSpec(count=1, resources={"VCPU": 1}, excluded_hosts=["z0-r0-h0"],
                       group=GroupSpec(policies=["anti-affinity"], scope="rack",
                                       member_hosts=["z0-r1-h0", "z1-r0-h0"]))
    placement = run(spec, cloud(), alternates=5)
    item = placement.instances[0]
    # The source's rack holds no other member, so its other hosts qualify.
    assert rack(item.host) in {"z0-r0", "z1-r1"}
    assert len(item.alternates) == 4
    assert {rack(a) for a in item.alternates} <= {"z0-r0", "z1-r1"}
    assert "z0-r0-h0" not in item.candidates
