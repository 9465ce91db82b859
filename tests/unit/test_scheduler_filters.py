"""Request spec validation, the snapshot, and every static filter."""

import pytest

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import CloudSnapshot, GroupSpec, HostState, RequestSpec
from fleetflow.scheduler.filters import run_filters
from fleetflow.scheduler.snapshot import capacity_of


def fleet():
    return CloudSnapshot([
        HostState("a1", uuid="ua1", region="na", zone="east", rack="r1",
                  capabilities={"gpu": "true", "sticker": "blue"}, traits={"AVX2", "CUDA"},
                  capacity={"VCPU": 8, "MEMORY_MB": 8192, "GPU": 1}),
        HostState("a2", uuid="ua2", region="na", zone="west", rack="r1",
                  capabilities={"sticker": "blue"}, traits={"AVX2"},
                  capacity={"VCPU": 8, "MEMORY_MB": 8192}, used={"VCPU": 7}),
        HostState("b1", uuid="ub1", region="eu", zone="central", rack="r1",
                  capabilities={"gpu": "true", "sticker": "red"}, traits={"AVX2", "CUDA"},
                  capacity={"VCPU": 8, "MEMORY_MB": 8192, "GPU": 2}),
        HostState("b2", uuid="ub2", state="maintenance", region="eu", zone="central", rack="r2",
                  capacity={"VCPU": 8, "MEMORY_MB": 8192}),
    ])


def names(spec):
    hosts, steps = run_filters(spec, fleet().hosts)
    return [h.name for h in hosts], {s.name: (s.before, s.after) for s in steps}


def test_state_filter_keeps_only_up_hosts():
    kept, steps = names(RequestSpec())
    assert kept == ["a1", "a2", "b1"]
    assert steps == {"state": (4, 3)}


def test_excluded_hosts_by_name_or_uuid():
    kept, steps = names(RequestSpec(excluded_hosts=["a1", "ub1"]))
    assert kept == ["a2"]
    assert steps["excluded-hosts"] == (3, 1)


def test_region_and_zone():
    assert names(RequestSpec(region="na"))[0] == ["a1", "a2"]
    assert names(RequestSpec(region="na", zone="west"))[0] == ["a2"]
    assert names(RequestSpec(zone="central"))[0] == ["b1"]


def test_required_and_forbidden_traits():
    assert names(RequestSpec(required_traits=["CUDA"]))[0] == ["a1", "b1"]
    assert names(RequestSpec(forbidden_traits=["CUDA"]))[0] == ["a2"]
    assert names(RequestSpec(required_traits=["AVX2"], forbidden_traits=["CUDA"]))[0] == ["a2"]


def test_capabilities_gpu_region_and_sticker_together():
    kept, steps = names(RequestSpec(capabilities={"gpu": "true", "region": "na",
                                                  "sticker": "blue"}))
    assert kept == ["a1"]
    assert steps["capabilities"] == (3, 1)


def test_topology_answers_capability_questions():
    assert names(RequestSpec(capabilities={"rack": "r1", "zone": "in east central"}))[0] == [
        "a1", "b1"]


def test_group_host_capabilities_bind_every_member():
    group = GroupSpec(policies=["host-capabilities"], capabilities={"sticker": "red"})
    kept, steps = names(RequestSpec(group=group))
    assert kept == ["b1"]
    assert steps["host-capabilities"] == (3, 1)
    # Without the policy the group's requirements are not applied.
    kept, _ = names(RequestSpec(group=GroupSpec(capabilities={"sticker": "red"})))
    assert kept == ["a1", "a2", "b1"]


def test_resources_filter_uses_free_capacity_and_absent_classes():
    assert names(RequestSpec(resources={"VCPU": 2}))[0] == ["a1", "b1"]
    assert names(RequestSpec(resources={"GPU": 2}))[0] == ["b1"]
    assert names(RequestSpec(resources={"VCPU": 1}))[0] == ["a1", "a2", "b1"]


def test_resources_filter_honours_a_usage_override():
    snapshot = fleet()
    spec = RequestSpec(resources={"VCPU": 4})
    hosts, _ = run_filters(spec, snapshot.hosts, usage={"a1": {"VCPU": 5}})
    assert [h.name for h in hosts] == ["b1"]


def test_capacity_applies_reserved_and_allocation_ratio():
    assert capacity_of({"total": 32, "reserved": 2, "allocation_ratio": 4.0}) == 120
    assert capacity_of({"total": 10, "allocation_ratio": 1.5}) == 15
    assert capacity_of({"total": 3, "reserved": 5}) == 0
    host = HostState.from_dict({"name": "h", "inventory": {
        "VCPU": {"total": 16, "allocation_ratio": 2.0}, "MEMORY_MB": {"total": 4096,
                                                                      "reserved": 512}}})
    assert host.capacity == {"VCPU": 32, "MEMORY_MB": 3584}
    assert host.fit_count({"VCPU": 4, "MEMORY_MB": 1024}) == 3


def test_snapshot_rejects_duplicate_names_and_sorts():
    with pytest.raises(ValueError):
        CloudSnapshot([HostState("x"), HostState("x")])
    assert [h.name for h in CloudSnapshot([HostState("b"), HostState("a")]).hosts] == ["a", "b"]


def test_spec_counts():
    spec = RequestSpec(count=3)
    assert (spec.min_count, spec.max_count) == (3, 3)
    assert (RequestSpec().min_count, RequestSpec().max_count) == (1, 1)
    assert (RequestSpec(max_count=4).min_count, RequestSpec(min_count=2).max_count) == (4, 2)
    for bad in ({"count": 2, "min_count": 1}, {"min_count": 3, "max_count": 2},
                {"count": 0}, {"resources": {"FOO": 1}}, {"resources": {"VCPU": -1}},
                {"count": 3, "instance_uuids": ["a", "b"]},
                {"required_traits": ["X"], "forbidden_traits": ["X"]},
                {"capabilities": {"cores": ">= lots"}}):
        with pytest.raises(InvalidInput):
            RequestSpec(**bad)


def test_group_validation():
    for bad in ({"policies": ["affinity", "anti-affinity"]}, {"policies": ["nearby"]},
                {"scope": "region"}, {"max_per_host": 0},
                {"policies": ["soft-affinity", "soft-anti-affinity"]}):
        with pytest.raises(InvalidInput):
            GroupSpec(**bad)
    group = GroupSpec(policies=["network-proximity", "anti-affinity", "host-capabilities"])
    assert group.placement_policy == "anti-affinity"


def test_spec_round_trips_through_json_dicts():
    import json

    spec = RequestSpec(min_count=2, max_count=5, resources={"VCPU": 2, "MEMORY_MB": 0},
                       capabilities={"gpu": "true"}, required_traits=["AVX2"], region="na",
                       group=GroupSpec(id="g", policies=["anti-affinity"], scope="rack",
                                       max_per_host=2, member_hosts=["a1"]),
                       excluded_hosts=["b1"], instance_uuids=list("abcde"))
    data = json.loads(json.dumps(spec.to_dict()))
    again = RequestSpec.from_dict(data)
    assert again == spec
    assert again.resources == {"VCPU": 2}
    assert again.instance_key(4) == "e"
    assert RequestSpec(count=2, instance_names=["x", "y"]).instance_key(1) == "y"
    assert RequestSpec(count=2).instance_key(1) == "1"


def test_group_spec_from_row_skips_unplaced_and_excluded_members():
    class Member:
        def __init__(self, instance_id, host):
            self.instance_id, self.host = instance_id, host

    class Row:
        id, policies, scope, max_per_host, capabilities = "g", ["anti-affinity"], "rack", 2, {}
        members = [Member("i1", "a1"), Member("i2", None), Member("i3", "b1"),
                   Member("i4", "a1")]

    group = GroupSpec.from_row(Row(), exclude_instances=["i3"])
    assert group.member_hosts == ["a1", "a1"]
    assert (group.scope, group.max_per_host) == ("rack", 2)


def test_spec_for_flavor_merges_extra_specs_into_capabilities():
    from fleetflow.persistence.models import Flavor

    flavor = Flavor(id="g1", name="g1.large", vcpus=4, ram_mb=8192, disk_gb=80,
                    extra_specs={"gpu": "true", "resources:GPU": "1", "sticker": "red"})
    spec = RequestSpec.for_flavor(flavor, capabilities={"sticker": "blue"}, count=2,
                                  region="na")
    assert spec.resources == {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 80, "GPU": 1}
    assert spec.capabilities == {"gpu": "true", "sticker": "blue"}
    assert (spec.max_count, spec.region) == (2, "na")
