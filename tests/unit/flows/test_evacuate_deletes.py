"""Deletes and moves, from the evacuation's side: a move never runs for a server a
delete took, and leaves nothing behind for it (docs/evacuation.md, "Deletes and moves").

The evacuate flow whole, on TaskFlow's in-memory backend against the real
small evacuation cloud, as in test_evacuate_flow.py.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.common import ids, states
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import groups
from fleetflow.persistence.evacuations import ServerBeingMoved
from fleetflow.persistence.fleet import stable_uuid
from fleetflow.persistence.models import GroupMember, Instance
from fleetflow.services.evacuations import EvacuationOps, EvacuationRequest
from fleetflow.services.reservations import ReservationOps

RESOURCES = {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
IMAGE = "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01"
SOURCE = "z1-r1-h01"


def boot(cloud, group_id: str | None = None) -> str:
    """An ACTIVE server made consistently on SOURCE: row, allocation, guest, membership."""
    uuid = ids.new_uuid()
    with cloud.database.session() as session:
        session.add(Instance(id=uuid, tenant_id="t1", name=f"vm-{uuid[:8]}", host=SOURCE,
                             status=states.ACTIVE, flavor_id="1", image_id=IMAGE,
                             group_id=group_id))
        if group_id:
            session.add(GroupMember(group_id=group_id, instance_id=uuid, host=SOURCE))
    cloud.runtime.placement.claim(uuid, {stable_uuid(SOURCE): RESOURCES}, "t1", "t1")
    cloud.runtime.compute.build_instance(SOURCE, uuid, RESOURCES, image=IMAGE)
    return uuid


def ops(cloud) -> EvacuationOps:
    return EvacuationOps(cloud.conf, cloud.database, submit=cloud.submit,
                         compute=cloud.runtime.compute)


def where(cloud, uuid: str) -> str:
    with cloud.database.session() as session:
        return session.get(Instance, uuid).host


def allocations(cloud, consumer: str) -> dict:
    return cloud.runtime.placement.get_allocations(consumer).allocations


def assert_clean(cloud) -> None:
    cloud.assert_audit_clean()


def servers(cloud) -> ReservationOps:
    return ReservationOps(cloud.conf, cloud.database, submit=cloud.submit)


def moves(cloud, evacuation_id: str) -> dict[str, dict]:
    return {m["id"]: m for m in ops(cloud).show(evacuation_id)["instances"]}


def test_a_server_deleted_while_the_evacuation_is_paused_is_skipped_when_it_resumes(
        evac_cloud):
    failing, fine = boot(evac_cloud), boot(evac_cloud)
    evac_cloud.runtime.compute.set_server_faults(SOURCE, failing, fail_move=True)
    view = ops(evac_cloud).evacuate(EvacuationRequest(
        hosts=[SOURCE], mode=states.MODE_LIVE, on_error=states.ON_ERROR_PAUSE,
        max_parallel=1))
    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS
    paused = moves(evac_cloud, view["id"])
    assert ops(evac_cloud).show(view["id"])["status"] == states.PAUSED
    assert {u: m["status"] for u, m in paused.items()} == {failing: states.FAILED,
                                                          fine: states.PENDING}
    # The server still waiting for its move cannot go; the one whose move failed can.
    with pytest.raises(ServerBeingMoved, match=view["id"]):
        servers(evac_cloud).delete_server("t1", fine)
    servers(evac_cloud).delete_server("t1", failing)
    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS
    ops(evac_cloud).resume(view["id"])
    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS
    done = ops(evac_cloud).show(view["id"])
    # It ends: a deleted server is skipped, not failed again (which would pause it again).
    assert done["status"] == states.PARTIAL
    ended = {m["id"]: m for m in done["instances"]}
    assert ended[fine]["status"] == states.DONE and where(evac_cloud, fine) != SOURCE
    assert ended[failing]["status"] == states.SKIPPED
    assert ended[failing]["fault"]["code"] == "SERVER_DELETED"
    with evac_cloud.database.session() as session:
        deleted = session.get(Instance, failing)
        assert (deleted.status, deleted.task_state) == (states.DELETED, None)
    assert allocations(evac_cloud, failing) == {}
    assert_clean(evac_cloud)


def _left_by_an_older_delete(cloud) -> tuple[str, str, str]:
    """A PAUSED evacuation holding the FAILED move of a server deleted while it moved,
    as a reservation delete left it before deletes waited for moves: the server
    DELETED and its guest gone, but the undone move gave it back its allocation
    and its group membership. (evacuation id, that server, a server still to move)"""
    with cloud.database.session() as session:
        group_id = groups.create(session, "t1", "apart", ["anti-affinity"]).id
    deleted, other = boot(cloud, group_id=group_id), boot(cloud)
    view = ops(cloud).evacuate(EvacuationRequest(hosts=[SOURCE], mode=states.MODE_LIVE,
                                                 max_parallel=1))
    cloud.posted.clear()
    cloud.runtime.compute.destroy_instance(SOURCE, deleted)
    with cloud.database.session() as session:
        session.execute(sa.update(Instance).where(Instance.id == deleted).values(
            status=states.DELETED, task_state=None))
        evac_rows.update_move(session, view["id"], deleted, status=states.FAILED)
        evac_rows.set_status(session, view["id"], states.PAUSED,
                             stopping=states.ON_ERROR_PAUSE)
    return view["id"], deleted, other


@pytest.mark.parametrize("action", ["resume", "skip", "revert"])
def test_what_an_older_delete_left_in_an_evacuation_goes_with_any_operator_action(
        evac_cloud, action):
    evacuation_id, deleted, other = _left_by_an_older_delete(evac_cloud)
    assert allocations(evac_cloud, deleted)  # the leftovers the audit reported for good
    if action == "resume":
        ops(evac_cloud).resume(evacuation_id)
    elif action == "skip":
        ops(evac_cloud).skip(evacuation_id, [deleted])
    else:
        ops(evac_cloud).revert(evacuation_id)
    while evac_cloud.posted:
        assert evac_cloud.run(evac_cloud.posted.pop(0)) == tf_states.SUCCESS
    ended = ops(evac_cloud).show(evacuation_id)
    assert ended["status"] == {"resume": states.PARTIAL, "skip": states.PARTIAL,
                               "revert": states.REVERTED}[action]
    statuses = {m["id"]: m["status"] for m in ended["instances"]}
    assert statuses[deleted] == (states.REVERTED if action == "revert" else states.SKIPPED)
    assert statuses[other] == (states.REVERTED if action == "revert" else states.DONE)
    assert allocations(evac_cloud, deleted) == {}
    with evac_cloud.database.session() as session:
        assert session.scalars(sa.select(GroupMember).where(
            GroupMember.instance_id == deleted)).all() == []
    assert_clean(evac_cloud)


def test_a_teardown_that_meets_a_moving_server_stops_before_touching_it(evac_cloud):
    """A teardown flow follows the rule too (one posted before the rule, or
    resumed): it stops while the move holds the server, and finishes after."""
    import threading
    import time

    from fleetflow.compute.drivers.fake_moves import MoveRules

    evac_cloud.driver.move_rules = MoveRules(live_seconds=1.0)
    uuid = boot(evac_cloud)
    view = ops(evac_cloud).evacuate(EvacuationRequest(hosts=[SOURCE], mode=states.MODE_LIVE))
    evacuation_job = evac_cloud.posted.pop()
    teardown = {"flow": "reservation-teardown",
                "kwargs": {"instance_ids": [uuid], "reservation_id": None},
                "store": {"tenant_id": "t1"}}
    outcome = []
    runner = threading.Thread(target=lambda: outcome.append(evac_cloud.run(evacuation_job)))
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while moves(evac_cloud, view["id"])[uuid]["step"] != "move":
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.01)
        stopped = evac_cloud.run(teardown)
    finally:
        runner.join(120)
    assert stopped != tf_states.SUCCESS
    assert outcome == [tf_states.SUCCESS]
    done = ops(evac_cloud).show(view["id"])
    assert done["status"] == states.DONE
    host = where(evac_cloud, uuid)
    assert host != SOURCE
    assert evac_cloud.runtime.compute.get_instance(host, uuid)["state"] == states.ACTIVE
    with evac_cloud.database.session() as session:
        assert session.get(Instance, uuid).status == states.ACTIVE
    # The move has ended: the same teardown now goes through.
    assert evac_cloud.run(teardown) == tf_states.SUCCESS
    with evac_cloud.database.session() as session:
        assert session.get(Instance, uuid).status == states.DELETED
    assert allocations(evac_cloud, uuid) == {}
    assert_clean(evac_cloud)
