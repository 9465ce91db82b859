"""One-pass placement: weighers, usage accounting, alternates, NoValidHost, counts."""

import json
from collections import Counter

import pytest

from fleetflow.scheduler import (
    CloudSnapshot,
    GroupSpec,
    HostState,
    NoValidHost,
    Placement,
    RequestSpec,
    schedule,
)


def fleet(count=4, vcpus=8, **extra):
    return CloudSnapshot(HostState(f"h{i}", uuid=f"u{i}", region="na", zone="z", rack="r",
                                   capacity={"VCPU": vcpus, "MEMORY_MB": 8192}, **extra)
                         for i in range(count))


def hosts_of(placement):
    return [p.host for p in placement.instances]


def test_spread_prefers_least_used_hosts():
    snapshot = fleet()
    snapshot.by_name["h0"].used = {"VCPU": 6}
    snapshot.by_name["h1"].used = {"VCPU": 2}
    placement = schedule(RequestSpec(count=3, resources={"VCPU": 1}), snapshot)
    assert hosts_of(placement) == ["h2", "h3", "h2"]


def test_spread_uses_the_dominant_share():
    snapshot = fleet(2)
    snapshot.by_name["h0"].used = {"MEMORY_MB": 8000}  # CPU idle, memory nearly full
    snapshot.by_name["h1"].used = {"VCPU": 4}
    placement = schedule(RequestSpec(count=1, resources={"VCPU": 1, "MEMORY_MB": 100}),
                         snapshot)
    assert hosts_of(placement) == ["h1"]


def test_pack_fills_the_most_used_host_first():
    snapshot = fleet()
    snapshot.by_name["h1"].used = {"VCPU": 2}
    placement = schedule(RequestSpec(count=8, resources={"VCPU": 1}), snapshot, weigher="pack")
    assert Counter(hosts_of(placement)) == {"h1": 6, "h0": 2}
    with pytest.raises(ValueError):
        schedule(RequestSpec(), snapshot, weigher="random")


def test_recent_build_failures_push_a_host_back():
    snapshot = fleet(3)
    snapshot.by_name["h0"].recent_failures = 2
    snapshot.by_name["h1"].recent_failures = 1
    snapshot.by_name["h2"].used = {"VCPU": 7}  # busy, but it never failed a build
    placement = schedule(RequestSpec(count=3, resources={"VCPU": 1}), snapshot)
    assert hosts_of(placement) == ["h2", "h1", "h1"]


def test_one_pass_never_overcommits_a_host():
    snapshot = fleet(3, vcpus=5)
    snapshot.by_name["h0"].used = {"VCPU": 3}
    placement = schedule(RequestSpec(count=5, resources={"VCPU": 2}), snapshot)
    counts = Counter(hosts_of(placement))
    assert counts == {"h0": 1, "h1": 2, "h2": 2}  # h0 had room for one only
    with pytest.raises(NoValidHost) as err:
        schedule(RequestSpec(count=6, resources={"VCPU": 2}), snapshot, weigher="pack")
    assert err.value.details["placed"] == 5
    # The snapshot handed in is untouched: the pass used its own copy of usage.
    assert snapshot.by_name["h0"].used == {"VCPU": 3} and snapshot.by_name["h1"].used == {}


def test_instance_k_sees_instances_before_it():
    # Spread alternates h0, h1, h0... because each placement raises its host's use.
    placement = schedule(RequestSpec(count=4, resources={"VCPU": 1}), fleet(2))
    assert hosts_of(placement) == ["h0", "h1", "h0", "h1"]


def test_min_and_max_count():
    snapshot = fleet(2, vcpus=3)
    spec = RequestSpec(min_count=4, max_count=10, resources={"VCPU": 1},
                       instance_names=[f"vm{i}" for i in range(10)])
    placement = schedule(spec, snapshot)
    assert len(placement.instances) == 6
    assert placement.unplaced == ["vm6", "vm7", "vm8", "vm9"]
    assert [p.instance for p in placement.instances] == [f"vm{i}" for i in range(6)]
    with pytest.raises(NoValidHost) as err:
        schedule(RequestSpec(min_count=7, max_count=10, resources={"VCPU": 1}), snapshot)
    assert err.value.details == {"filters": err.value.details["filters"], "placed": 6,
                                 "min_count": 7}


def test_no_valid_host_explains_each_filter():
    snapshot = CloudSnapshot(
        [HostState(f"g{i}", capabilities={"gpu": "true"}, capacity={"VCPU": 8})
         for i in range(9)] +
        [HostState(f"n{i:03d}", capacity={"VCPU": 8}) for i in range(119)])
    spec = RequestSpec(count=10, resources={"VCPU": 1}, capabilities={"gpu": "true"},
                       group=GroupSpec(policies=["anti-affinity"], max_per_host=1))
    with pytest.raises(NoValidHost) as err:
        schedule(spec, snapshot)
    error = err.value
    assert error.code == "NO_VALID_HOST"
    assert str(error).endswith("capabilities: 128 -> 9; anti-affinity: 9 -> 0")
    assert [f["name"] for f in error.details["filters"]] == [
        "state", "capabilities", "resources", "anti-affinity"]


def test_no_valid_host_names_resources_when_hosts_fill_up():
    with pytest.raises(NoValidHost) as err:
        schedule(RequestSpec(count=5, resources={"VCPU": 4}), fleet(2))
    assert str(err.value).endswith("resources (VCPU): 2 -> 0")
    with pytest.raises(NoValidHost) as err:
        schedule(RequestSpec(count=1), CloudSnapshot([]))
    assert "0 hosts passed every filter" in str(err.value)


def test_no_valid_host_names_the_resource_classes_that_ran_out():
    # 128 hosts with CPU and memory to spare; a disk too small on every one,
    # memory short on three of them: disk first, as more hosts lack it.
    snapshot = CloudSnapshot(
        HostState(f"h{i:03d}", capacity={"VCPU": 64, "MEMORY_MB": 1024 if i < 3 else 65536,
                                         "DISK_GB": 100})
        for i in range(128))
    spec = RequestSpec(count=1, resources={"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 500})
    with pytest.raises(NoValidHost) as err:
        schedule(spec, snapshot)
    assert str(err.value).endswith("resources (DISK_GB, MEMORY_MB): 128 -> 0")
    step = err.value.details["filters"][-1]
    assert step["name"] == "resources" and step["short_of"] == ["DISK_GB", "MEMORY_MB"]


def test_the_classes_a_pass_used_up_are_named_and_survive_json():
    # Memory is plentiful, CPU runs out as the pass places instances.
    snapshot = fleet(2, vcpus=4)
    with pytest.raises(NoValidHost) as err:
        schedule(RequestSpec(count=3, resources={"VCPU": 4, "MEMORY_MB": 1}), snapshot)
    assert "resources (VCPU): 2 -> 0" in str(err.value)
    small = CloudSnapshot([HostState("a", capacity={"VCPU": 4}),
                           HostState("b", capacity={"VCPU": 1})])
    placement = schedule(RequestSpec(count=1, resources={"VCPU": 2}), small)
    assert placement.explanation == "resources (VCPU): 2 -> 1"
    again = Placement.from_dict(json.loads(json.dumps(placement.to_dict())))
    assert again.filters == placement.filters
    assert again.explanation == placement.explanation


def test_alternates_fit_differ_from_primary_and_rotate():
    snapshot = fleet(6, vcpus=2)
    placement = schedule(RequestSpec(count=4, resources={"VCPU": 1}), snapshot, alternates=2)
    used = Counter(hosts_of(placement))
    named = Counter()
    for item in placement.instances:
        assert len(item.alternates) == 2 and item.host not in item.alternates
        assert item.candidates == [item.host, *item.alternates]
        for alt in item.alternates:
            assert used[alt] < 2  # room for one more given every primary
        named.update(item.alternates)
    assert len(named) > 2  # not every instance names the same two hosts


def test_alternates_skip_hosts_full_after_the_primaries():
    snapshot = fleet(3, vcpus=1)
    placement = schedule(RequestSpec(count=2, resources={"VCPU": 1}), snapshot, alternates=2)
    assert [p.alternates for p in placement.instances] == [["h2"], ["h2"]]
    none = schedule(RequestSpec(count=2, resources={"VCPU": 1}), snapshot, alternates=0)
    assert all(p.alternates == [] for p in none.instances)


def test_placement_round_trips_through_json():
    spec = RequestSpec(count=3, resources={"VCPU": 1}, instance_uuids=["a", "b", "c"])
    placement = schedule(spec, fleet())
    data = json.loads(json.dumps(placement.to_dict()))
    again = Placement.from_dict(data)
    assert again == placement
    assert set(again.by_instance()) == {"a", "b", "c"}
    assert again.host_uuids["h0"] == "u0"
    assert again.explanation == "4 hosts passed every filter"


def test_request_without_resources_still_spreads():
    placement = schedule(RequestSpec(count=4), fleet())
    assert sorted(hosts_of(placement)) == ["h0", "h1", "h2", "h3"]
