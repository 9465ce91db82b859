"""The evacuate flow with its servers moved in groups ([conductor] instances_per_atom).

Every scenario of the per-server chains (test_evacuate_flow.py,
test_evacuate_deletes.py) runs again here on a flow of one task a group, the
servers of a lane moved one after another by it; then what only groups do:
a group run again resumes each member from its move row.
"""

from __future__ import annotations

import pytest
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.common.crash_points import MEMBER_CLAIMED, MEMBER_MOVED, MEMBER_UNDONE
from fleetflow.flows.evacuate import move
from fleetflow.flows.evacuate.flow import evacuate_flow
from fleetflow.persistence import groups
from fleetflow.persistence.fleet import stable_uuid
from fleetflow.services.evacuations import EvacuationRequest
from tests.unit.flows import test_evacuate_deletes as deletes
from tests.unit.flows import test_evacuate_flow as chains
from tests.unit.flows.grouped import in_groups

# The chains' contract test builds its own flow: it has no group to check.
SCENARIOS = {name: test for module in (chains, deletes)
             for name, test in vars(module).items()
             if name.startswith("test_") and "contract" not in name}
globals().update(SCENARIOS)


@pytest.fixture
def evac_cloud(fleetflow_evacuation_cloud):
    return in_groups(fleetflow_evacuation_cloud, "evacuate")


def _servers(cloud, n: int, mode: str = states.MODE_REBUILD) -> list[str]:
    uuids = [chains.boot(cloud) for _ in range(n)]
    if mode == states.MODE_REBUILD:
        chains.kill(cloud, chains.SOURCE)
    return uuids


def _evacuate(cloud, mode: str = states.MODE_REBUILD, **fields) -> dict:
    return chains.ops(cloud).evacuate(EvacuationRequest(hosts=[chains.SOURCE], mode=mode,
                                                         **fields))


def test_an_evacuation_larger_than_a_group_gets_one_task_a_group_of_its_lane(
        fleetflow_evacuation_cloud):
    cloud = fleetflow_evacuation_cloud
    cloud.conf.set_override("instances_per_atom", 2, group="conductor")
    # One a group is the limit, not the rule: two servers keep their chains.
    other = "z1-r1-h02"
    for _ in range(2):
        chains.boot(cloud, host=other)
    chains.ops(cloud).evacuate(EvacuationRequest(hosts=[other], mode=states.MODE_LIVE))
    assert "batch" not in cloud.posted[-1]["kwargs"]
    _servers(cloud, 5)
    _evacuate(cloud, max_parallel=2)
    job = cloud.posted[-1]
    assert job["kwargs"]["batch"] == 2
    flow = evacuate_flow(**job["kwargs"])
    moves = next(n for n, _ in flow.iter_nodes() if n.name == "moves")
    lanes = {lane.name: [(t.name, t.indexes) for t, _ in lane.iter_nodes()]
             for lane, _ in moves.iter_nodes()}
    assert lanes == {"lane-00": [("batch-0000", [0, 2]), ("batch-0004", [4])],
                     "lane-01": [("batch-0001", [1, 3])]}
    assert flow.requires <= set(job["store"]) | {"fence"}
    assert cloud.run(job) == tf_states.SUCCESS


@pytest.mark.parametrize("in_group", [False, True], ids=["fast-path", "server-group"])
@pytest.mark.parametrize("point", [MEMBER_CLAIMED, MEMBER_MOVED])
def test_a_group_stopped_mid_move_resumes_each_member_from_its_row(
        evac_cloud, fleetflow_crash_points, point, in_group):
    group_id = None
    if in_group:
        # Claimed by each try itself, not by the fast path beforehand.
        with evac_cloud.database.session() as session:
            group_id = groups.create(session, "t1", "soft", ["soft-anti-affinity"]).id
    uuids = [chains.boot(evac_cloud, group_id=group_id) for _ in range(3)]
    chains.kill(evac_cloud, chains.SOURCE)
    view = _evacuate(evac_cloud, max_parallel=1)
    job = evac_cloud.posted[-1]
    fleetflow_crash_points.arm("batch-0000", point, stop=True)
    evac_cloud.run(job)
    assert ("batch-0000", point) in fleetflow_crash_points.reached
    assert evac_cloud.resume(job) == tf_states.SUCCESS
    done = chains.ops(evac_cloud).show(view["id"])
    assert done["status"] == states.DONE
    for uuid in uuids:
        # Moved once (the start sent again found its move), one try counted.
        chains.assert_moved_once(evac_cloud, done, uuid, chains.SOURCE)
        move = next(m for m in done["instances"] if m["id"] == uuid)
        assert move["attempts"] == 1 and move["hosts_tried"] == [move["destination"]]
    chains.assert_clean(evac_cloud)


def test_a_group_stopped_after_undoing_a_try_does_not_try_that_host_again(
        evac_cloud, fleetflow_crash_points):
    with evac_cloud.database.session() as session:
        # In a server group: no fast-path claim, each try claims for itself.
        group_id = groups.create(session, "t1", "soft", ["soft-anti-affinity"]).id
    uuid = chains.boot(evac_cloud, group_id=group_id)
    request = EvacuationRequest(hosts=[chains.SOURCE], mode=states.MODE_LIVE)
    planned = chains.ops(evac_cloud).dry_run(request)["instances"][0]["destination"]
    evac_cloud.runtime.compute.set_faults(planned, fail_next_moves=1)
    view = _evacuate(evac_cloud, mode=states.MODE_LIVE)
    job = evac_cloud.posted[-1]
    fleetflow_crash_points.arm("batch-0000", MEMBER_UNDONE, stop=True)
    evac_cloud.run(job)
    # The host would take the move now: only the row says it was tried.
    evac_cloud.runtime.compute.set_faults(planned, fail_next_moves=0)
    assert evac_cloud.resume(job) == tf_states.SUCCESS
    done = chains.ops(evac_cloud).show(view["id"])
    landed = chains.assert_moved_once(evac_cloud, done, uuid, chains.SOURCE)
    move = done["instances"][0]
    assert landed != planned
    assert move["hosts_tried"] == [planned, landed] and move["attempts"] == 2
    assert chains.guest(evac_cloud, planned, uuid) is None
    chains.assert_clean(evac_cloud)


def test_a_group_that_fails_undoes_its_try_under_way_and_keeps_finished_moves(
        evac_cloud, monkeypatch):
    _servers(evac_cloud, 3, states.MODE_LIVE)
    view = _evacuate(evac_cloud, mode=states.MODE_LIVE, max_parallel=1)
    job = evac_cloud.posted[-1]
    order = job["store"]["instance_uuids"]
    real_confirm = move.confirm

    def confirm(evacuation_id, instance_uuids, index, *args, **kwargs):
        if index == 1:
            # Not a failed try (those move on): a fault of the task itself.
            raise RuntimeError("confirm broke")
        return real_confirm(evacuation_id, instance_uuids, index, *args, **kwargs)
    monkeypatch.setattr(move, "confirm", confirm)
    assert evac_cloud.run(job) == tf_states.REVERTED
    failed = chains.ops(evac_cloud).show(view["id"])
    assert failed["status"] == states.FAILED
    statuses = {m["id"]: m["status"] for m in failed["instances"]}
    assert statuses[order[0]] == states.DONE
    chains.assert_moved_once(evac_cloud, failed, order[0], chains.SOURCE)
    for uuid in order[1:]:
        # Under way (moved, not confirmed) or only claimed: back where it was.
        assert statuses[uuid] != states.DONE
        assert chains.where(evac_cloud, uuid) == chains.SOURCE
        assert chains.allocations(evac_cloud, uuid) == {
            stable_uuid(chains.SOURCE): chains.RESOURCES}
        assert chains.guest(evac_cloud, chains.SOURCE, uuid)["state"] == states.ACTIVE
    moved = next(m for m in failed["instances"] if m["id"] == order[1])
    assert chains.guest(evac_cloud, moved["destination"], order[1]) is None
    chains.assert_clean(evac_cloud)
