"""The vcluster teardown with its members in groups ([conductor] instances_per_atom).

The per-member scenarios that take members out (test_vcluster_flow.py) run again
on a teardown of one task a group of two volumes or two servers; then what only
groups do: a group's guests in one call, and a failure in a group.
"""

from __future__ import annotations

import pytest

from fleetflow.common import states
from fleetflow.compute.exceptions import ComputeError
from fleetflow.flows.vcluster.teardown import teardown_flow
from tests.unit.flows import test_vcluster_flow as chains
from tests.unit.flows.grouped import in_groups

SCENARIOS = {name: getattr(chains, name) for name in (
    "test_add_then_remove_members", "test_delete_takes_everything_down",
    "test_delete_goes_through_when_a_server_host_is_dead")}
globals().update(SCENARIOS)

FOUR_SERVERS = {"instances": [chains.server(f"s{i}") for i in range(4)]
                + [chains.volume(f"v{i}") for i in range(3)]}


@pytest.fixture
def evac_cloud(fleetflow_evacuation_cloud):
    return in_groups(fleetflow_evacuation_cloud, "vcluster-teardown")


def _built(cloud) -> tuple[str, dict]:
    vcluster_id = chains.create(cloud, FOUR_SERVERS, name="four")
    assert chains.run_last(cloud) == "SUCCESS"
    return vcluster_id, chains.members(chains.show(cloud, vcluster_id))


def test_a_teardown_larger_than_a_group_gets_one_task_a_group(fleetflow_evacuation_cloud):
    cloud = fleetflow_evacuation_cloud
    vcluster_id, _found = _built(cloud)
    cloud.conf.set_override("instances_per_atom", 2, group="conductor")
    chains.ops(cloud).delete("t1", vcluster_id)
    job = cloud.posted[-1]
    assert job["kwargs"]["batch"] == 2
    flow = teardown_flow(**job["kwargs"])
    members = next(n for n, _ in flow.iter_nodes() if n.name == "members")
    tasks = {task.name: task.inject for task, _ in members.iter_nodes()}
    servers = [s["id"] for s in job["kwargs"]["servers"]]
    volumes = [v["id"] for v in job["kwargs"]["volumes"]]
    assert tasks == {"del-vols-0000": {"volume_ids": volumes[:2]},
                     "del-vols-0002": {"volume_ids": volumes[2:]},
                     "del-srvs-0000": {"instance_ids": servers[:2]},
                     "del-srvs-0002": {"instance_ids": servers[2:]}}
    assert flow.requires <= set(job["store"]) | {"fence"}
    assert cloud.run(job) == "SUCCESS"
    assert chains.show(cloud, vcluster_id)["status"] == states.DELETED
    chains.assert_clean(cloud)


def test_a_groups_guests_go_in_one_call(evac_cloud, monkeypatch):
    vcluster_id, found = _built(evac_cloud)
    batches, at_once = [], evac_cloud.driver.destroy_at_once
    monkeypatch.setattr(evac_cloud.driver, "destroy_at_once",
                        lambda destroys: batches.append(len(destroys)) or at_once(destroys))
    chains.ops(evac_cloud).delete("t1", vcluster_id)
    assert chains.run_last(evac_cloud) == "SUCCESS"
    assert sorted(batches) == [2, 2]
    for name in ("s0", "s1", "s2", "s3"):
        assert evac_cloud.runtime.compute.get_instance(found[name]["host"],
                                                       found[name]["id"]) is None
    chains.assert_nothing_held(evac_cloud, {"instances": list(found.values())})
    chains.assert_clean(evac_cloud)


def test_a_server_whose_destroy_fails_stops_the_teardown_until_resumed(evac_cloud,
                                                                        monkeypatch):
    vcluster_id, found = _built(evac_cloud)
    failing, at_once = found["s1"]["id"], evac_cloud.driver.destroy_at_once

    def refuse(destroys):
        done = iter(at_once([d for d in destroys if d["uuid"] != failing]))
        return [ComputeError(f"{d['uuid']}: the host refused") if d["uuid"] == failing
                else next(done) for d in destroys]
    monkeypatch.setattr(evac_cloud.driver, "destroy_at_once", refuse)
    chains.ops(evac_cloud).delete("t1", vcluster_id)
    job = evac_cloud.posted[-1]
    assert evac_cloud.run(job) != "SUCCESS"
    after = chains.members(chains.show(evac_cloud, vcluster_id))
    assert after["s1"]["status"] == states.ERROR
    assert "the host refused" in after["s1"]["fault"]["message"]
    assert evac_cloud.runtime.compute.get_instance(found["s1"]["host"], failing) is not None
    # The group's other server, and the other group's, were destroyed all the same.
    for name in ("s0", "s2", "s3"):
        assert evac_cloud.runtime.compute.get_instance(found[name]["host"],
                                                       found[name]["id"]) is None
    monkeypatch.setattr(evac_cloud.driver, "destroy_at_once", at_once)
    assert evac_cloud.run(job) == "SUCCESS"
    assert chains.show(evac_cloud, vcluster_id)["status"] == states.DELETED
    chains.assert_clean(evac_cloud)
