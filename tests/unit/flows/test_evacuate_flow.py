"""The evacuate flow, whole, on TaskFlow's in-memory backend against real parts.

Servers are made consistently on a host (row, allocation, guest), the host is
killed or drained, the evacuation is created the way the API does, and its
posted job is run. Every test ends by checking the world, not the flow:
where each guest runs, what placement holds, what the rows say.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.common import ids, states
from fleetflow.common.exceptions import NotFound
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import groups
from fleetflow.persistence.fleet import stable_uuid
from fleetflow.persistence.models import GroupMember, Host, Instance, Volume
from fleetflow.services.evacuations import EvacuationOps, EvacuationRequest, HostAlive

RESOURCES = {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
IMAGE = "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01"
SOURCE = "z1-r1-h01"


def boot(cloud, host: str = SOURCE, group_id: str | None = None) -> str:
    """An ACTIVE server made consistently on ``host``: row, allocation, guest, membership."""
    uuid = ids.new_uuid()
    with cloud.database.session() as session:
        session.add(Instance(id=uuid, tenant_id="t1", name=f"vm-{uuid[:8]}", host=host,
                             status=states.ACTIVE, flavor_id="1", image_id=IMAGE,
                             group_id=group_id))
        if group_id:
            session.add(GroupMember(group_id=group_id, instance_id=uuid, host=host))
    cloud.runtime.placement.claim(uuid, {stable_uuid(host): RESOURCES}, "t1", "t1")
    cloud.runtime.compute.build_instance(host, uuid, RESOURCES, image=IMAGE)
    return uuid


def kill(cloud, host: str) -> None:
    cloud.runtime.compute.set_faults(host, dead=True)
    with cloud.database.session() as session:
        session.execute(sa.update(Host).where(Host.name == host).values(state="down"))


def ops(cloud) -> EvacuationOps:
    return EvacuationOps(cloud.conf, cloud.database, submit=cloud.submit,
                         compute=cloud.runtime.compute)


def evacuate(cloud, hosts=(SOURCE,), mode=states.MODE_REBUILD, **kwargs) -> dict:
    view = ops(cloud).evacuate(EvacuationRequest(hosts=list(hosts), mode=mode, **kwargs))
    assert cloud.run(cloud.posted[-1]) == tf_states.SUCCESS
    return ops(cloud).show(view["id"])


def where(cloud, uuid: str) -> str:
    with cloud.database.session() as session:
        return session.get(Instance, uuid).host


def allocations(cloud, consumer: str) -> dict:
    return cloud.runtime.placement.get_allocations(consumer).allocations


def guest(cloud, host: str, uuid: str):
    return cloud.runtime.compute.get_instance(host, uuid)


def assert_clean(cloud) -> None:
    from fleetflow.services.audit.report import audit

    report = audit(cloud.database, cloud.runtime.placement, cloud.runtime.compute,
                   strict=True)
    assert report.clean, report.summary()


def assert_moved_once(cloud, evacuation: dict, uuid: str, source: str) -> str:
    """One running copy, on the row's host, allocations only there, no migration consumer."""
    host = where(cloud, uuid)
    assert host != source
    assert allocations(cloud, uuid) == {stable_uuid(host): RESOURCES}
    move = next(m for m in evacuation["instances"] if m["id"] == uuid)
    assert move["status"] == states.DONE and move["destination"] == host
    for attempt in range(move["attempts"] + 1):
        migration = evac_rows.migration_id_for(evacuation["id"], uuid, attempt)
        assert allocations(cloud, migration) == {}
    assert guest(cloud, host, uuid)["state"] == states.ACTIVE
    assert cloud.driver.move_count(uuid) == 1
    return host


def test_contract_every_requirement_is_provided_or_in_the_store(evac_cloud):
    from fleetflow.flows.evacuate.flow import evacuate_flow

    boot(evac_cloud)
    boot(evac_cloud)
    kill(evac_cloud, SOURCE)
    ops(evac_cloud).evacuate(EvacuationRequest(hosts=[SOURCE], mode="rebuild",
                                               max_parallel=1))
    job = evac_cloud.posted[-1]
    flow = evacuate_flow(**job["kwargs"])
    names = [node.name for node, _ in flow.iter_nodes()]
    assert names == ["evacuation-lifecycle", "prepare-hosts", "schedule", "claim-primaries",
                     "moves", "finish"]
    provided = set(job["store"]) | {"fence", "move_placements", "primary_moves_claimed",
                                    "srv-0000.host", "srv-0001.host", "srv-0000.migration",
                                    "srv-0001.migration"}
    assert flow.requires <= provided | {"index"}
    # One lane: the two servers' chains run one after the other.
    moves = next(n for n, _ in flow.iter_nodes() if n.name == "moves")
    lanes = [lane.name for lane in moves]
    assert lanes == ["lane-00"]


def test_rebuild_moves_every_server_and_the_returning_host_destroys_its_copies(evac_cloud):
    servers = [boot(evac_cloud) for _ in range(3)]
    tokens = {u: guest(evac_cloud, SOURCE, u)["data_token"] for u in servers}
    kill(evac_cloud, SOURCE)
    evacuation = evacuate(evac_cloud)
    assert evacuation["status"] == states.DONE
    assert evacuation["progress"]["done"] == 3
    for uuid in servers:
        host = assert_moved_once(evac_cloud, evacuation, uuid, SOURCE)
        # Rebuilt from the image: the data on the dead disk is gone.
        assert guest(evac_cloud, host, uuid)["data_token"] != tokens[uuid]
    with evac_cloud.database.session() as session:
        assert session.execute(sa.select(Host.evacuation_id).where(
            Host.name == SOURCE)).scalar() is None
    # The host comes back: it asks the database and destroys the evacuated copies.
    evac_cloud.runtime.compute.set_faults(SOURCE, dead=False)
    assert evac_cloud.runtime.compute.list_instances(SOURCE) == []
    with evac_cloud.database.session() as session:
        assert session.execute(sa.select(Host.state).where(Host.name == SOURCE)).scalar() \
            == states.HOST_DOWN  # no new work until an operator sets it up
    assert_clean(evac_cloud)


def test_live_and_cold_keep_the_data(evac_cloud):
    live, cold = boot(evac_cloud, "z1-r1-h01"), boot(evac_cloud, "z1-r1-h02")
    tokens = {u: guest(evac_cloud, h, u)["data_token"]
              for u, h in ((live, "z1-r1-h01"), (cold, "z1-r1-h02"))}
    done = evacuate(evac_cloud, ["z1-r1-h01"], mode=states.MODE_LIVE)
    host = assert_moved_once(evac_cloud, done, live, "z1-r1-h01")
    assert guest(evac_cloud, host, live)["data_token"] == tokens[live]
    assert guest(evac_cloud, "z1-r1-h01", live) is None
    done = evacuate(evac_cloud, ["z1-r1-h02"], mode=states.MODE_COLD)
    host = assert_moved_once(evac_cloud, done, cold, "z1-r1-h02")
    assert guest(evac_cloud, host, cold)["data_token"] == tokens[cold]
    assert guest(evac_cloud, "z1-r1-h02", cold) is None
    assert_clean(evac_cloud)


def test_drain_puts_the_host_in_maintenance_and_empties_it(evac_cloud):
    servers = [boot(evac_cloud) for _ in range(2)]
    done = evacuate(evac_cloud, mode=states.MODE_DRAIN)
    assert done["status"] == states.DONE
    for uuid in servers:
        assert_moved_once(evac_cloud, done, uuid, SOURCE)
    assert evac_cloud.runtime.compute.list_instances(SOURCE) == []
    with evac_cloud.database.session() as session:
        assert session.execute(sa.select(Host.state).where(Host.name == SOURCE)).scalar() \
            == states.HOST_MAINTENANCE
    assert_clean(evac_cloud)


def test_drain_falls_back_to_cold_for_a_server_that_cannot_live_migrate(evac_cloud):
    stuck, fine = boot(evac_cloud), boot(evac_cloud)
    evac_cloud.runtime.compute.set_server_faults(SOURCE, stuck, live_migratable=False)
    done = evacuate(evac_cloud, mode=states.MODE_DRAIN, fallback=states.FALLBACK_COLD)
    assert done["status"] == states.DONE
    modes = {m["id"]: m["mode"] for m in done["instances"]}
    assert modes == {stuck: states.MODE_COLD, fine: states.MODE_LIVE}
    for uuid in (stuck, fine):
        assert_moved_once(evac_cloud, done, uuid, SOURCE)
    assert_clean(evac_cloud)


def test_a_failed_move_is_absorbed_by_an_alternate(evac_cloud):
    uuid = boot(evac_cloud)
    request = EvacuationRequest(hosts=[SOURCE], mode=states.MODE_LIVE)
    planned = ops(evac_cloud).dry_run(request)["instances"][0]["destination"]
    evac_cloud.runtime.compute.set_faults(planned, fail_next_moves=1)
    done = evacuate(evac_cloud, mode=states.MODE_LIVE, on_error=states.ON_ERROR_PAUSE)
    assert done["status"] == states.DONE
    landed = assert_moved_once(evac_cloud, done, uuid, SOURCE)
    move = done["instances"][0]
    assert move["hosts_tried"] == [planned, landed] and move["attempts"] == 2
    assert landed != planned and move["fault"] is None
    # The failed try left nothing on the broken host.
    assert guest(evac_cloud, planned, uuid) is None
    assert_clean(evac_cloud)


def _one_failing_one_fine(cloud, on_error):
    failing, fine = boot(cloud), boot(cloud)
    cloud.runtime.compute.set_server_faults(SOURCE, failing, fail_move=True)
    view = ops(cloud).evacuate(EvacuationRequest(
        hosts=[SOURCE], mode=states.MODE_LIVE, on_error=on_error, max_parallel=1))
    assert cloud.run(cloud.posted[-1]) == tf_states.SUCCESS
    return view["id"], failing, fine


def test_pause_then_resume(evac_cloud):
    eid, failing, fine = _one_failing_one_fine(evac_cloud, states.ON_ERROR_PAUSE)
    paused = ops(evac_cloud).show(eid)
    assert paused["status"] == states.PAUSED
    statuses = {m["id"]: m["status"] for m in paused["instances"]}
    assert statuses == {failing: states.FAILED, fine: states.PENDING}
    fault = next(m["fault"] for m in paused["instances"] if m["id"] == failing)
    assert fault["code"] == "MIGRATION_FAILED" and fault["step"] == "move"
    # Nothing of the failed tries is left: the server still runs where it was.
    assert where(evac_cloud, failing) == SOURCE
    assert allocations(evac_cloud, failing) == {stable_uuid(SOURCE): RESOURCES}
    assert guest(evac_cloud, SOURCE, failing)["state"] == states.ACTIVE
    evac_cloud.runtime.compute.set_server_faults(SOURCE, failing, fail_move=False)
    resumed = ops(evac_cloud).resume(eid)
    assert resumed["status"] == states.PENDING and resumed["flow_id"] != paused["flow_id"]
    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS
    done = ops(evac_cloud).show(eid)
    assert done["status"] == states.DONE
    for uuid in (failing, fine):
        assert_moved_once(evac_cloud, done, uuid, SOURCE)
    assert_clean(evac_cloud)


def test_pause_then_skip(evac_cloud):
    eid, failing, fine = _one_failing_one_fine(evac_cloud, states.ON_ERROR_PAUSE)
    ops(evac_cloud).skip(eid, [failing])
    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS
    done = ops(evac_cloud).show(eid)
    assert done["status"] == states.PARTIAL
    assert {m["id"]: m["status"] for m in done["instances"]} == {
        failing: states.SKIPPED, fine: states.DONE}
    assert where(evac_cloud, failing) == SOURCE
    assert_moved_once(evac_cloud, done, fine, SOURCE)
    assert_clean(evac_cloud)


def test_pause_then_revert(evac_cloud):
    eid, failing, fine = _one_failing_one_fine(evac_cloud, states.ON_ERROR_PAUSE)
    reverted = ops(evac_cloud).revert(eid)
    assert reverted["status"] == states.REVERTED
    assert {m["status"] for m in reverted["instances"]} == {states.REVERTED}
    for uuid in (failing, fine):
        assert where(evac_cloud, uuid) == SOURCE
        assert allocations(evac_cloud, uuid) == {stable_uuid(SOURCE): RESOURCES}
    # Reverted evacuations release the host: a new one may start.
    assert ops(evac_cloud).evacuate(EvacuationRequest(hosts=[SOURCE], mode="live"))
    assert_clean(evac_cloud)


def test_continue_ends_partial(evac_cloud):
    eid, failing, fine = _one_failing_one_fine(evac_cloud, states.ON_ERROR_CONTINUE)
    done = ops(evac_cloud).show(eid)
    assert done["status"] == states.PARTIAL
    assert {m["id"]: m["status"] for m in done["instances"]} == {
        failing: states.FAILED, fine: states.DONE}
    assert where(evac_cloud, failing) == SOURCE
    assert_moved_once(evac_cloud, done, fine, SOURCE)
    assert_clean(evac_cloud)


def test_on_error_revert_stops_everything_not_finished(evac_cloud):
    eid, failing, fine = _one_failing_one_fine(evac_cloud, states.ON_ERROR_REVERT)
    done = ops(evac_cloud).show(eid)
    assert done["status"] == states.REVERTED
    assert {m["id"]: m["status"] for m in done["instances"]} == {
        failing: states.FAILED, fine: states.REVERTED}
    assert where(evac_cloud, fine) == SOURCE
    assert_clean(evac_cloud)


def test_group_rules_hold_when_two_hosts_are_evacuated_at_once(evac_cloud):
    with evac_cloud.database.session() as session:
        anti = groups.create(session, "t1", "anti", ["anti-affinity"]).id
        together = groups.create(session, "t1", "together", ["affinity"]).id
    a = [boot(evac_cloud, "z1-r1-h01", anti), boot(evac_cloud, "z1-r1-h02", anti)]
    b = [boot(evac_cloud, "z1-r1-h01", together), boot(evac_cloud, "z1-r1-h01", together)]
    for host in ("z1-r1-h01", "z1-r1-h02"):
        kill(evac_cloud, host)
    done = evacuate(evac_cloud, ["z1-r1-h01", "z1-r1-h02"])
    assert done["status"] == states.DONE
    assert where(evac_cloud, a[0]) != where(evac_cloud, a[1])
    assert where(evac_cloud, b[0]) == where(evac_cloud, b[1])
    with evac_cloud.database.session() as session:
        members = dict(session.execute(
            sa.select(GroupMember.instance_id, GroupMember.host)).all())
    assert all(members[u] == where(evac_cloud, u) for u in a + b)
    assert_clean(evac_cloud)


def test_volumes_reattached_where_reachable_and_local_ones_lost(evac_cloud):
    uuid = boot(evac_cloud)
    shared, local = ids.new_uuid(), ids.new_uuid()
    with evac_cloud.database.session() as session:
        for volume_id, backend in ((shared, "z1-r1-shared"), (local, f"{SOURCE}-local")):
            session.add(Volume(id=volume_id, tenant_id="t1", size_gb=10, backend=backend,
                               status=states.VOLUME_IN_USE, instance_id=uuid))
    for volume_id, backend in ((shared, "z1-r1-shared"), (local, f"{SOURCE}-local")):
        evac_cloud.runtime.placement.claim(volume_id, {stable_uuid(backend): {"DISK_GB": 10}},
                                           "t1", "t1")
    for volume in (shared, local):
        evac_cloud.runtime.compute.attach_volume(SOURCE, uuid, volume)
    kill(evac_cloud, SOURCE)
    done = evacuate(evac_cloud)
    host = assert_moved_once(evac_cloud, done, uuid, SOURCE)
    assert host.startswith("z1-r1-")  # the rack-wide backend's rack
    assert guest(evac_cloud, host, uuid)["volumes"] == [shared]
    assert done["instances"][0]["volumes_lost"] == [local]
    assert_clean(evac_cloud)


def test_rebuild_refused_while_the_host_is_up_or_answers(evac_cloud):
    boot(evac_cloud)
    with pytest.raises(HostAlive):
        ops(evac_cloud).evacuate(EvacuationRequest(hosts=[SOURCE], mode="rebuild"))
    with evac_cloud.database.session() as session:
        session.execute(sa.update(Host).where(Host.name == SOURCE).values(state="down"))
    with pytest.raises(HostAlive):  # down in the database, but it still answers
        ops(evac_cloud).evacuate(EvacuationRequest(hosts=[SOURCE], mode="rebuild"))
    assert evac_cloud.posted == []
    with pytest.raises(NotFound):
        ops(evac_cloud).evacuate(EvacuationRequest(hosts=["nope"], mode="live"))


def test_one_evacuation_at_a_time_per_host(evac_cloud):
    from fleetflow.persistence.evacuations import EvacuationInProgress

    boot(evac_cloud)
    ops(evac_cloud).evacuate(EvacuationRequest(hosts=[SOURCE], mode="live"))
    with pytest.raises(EvacuationInProgress):
        ops(evac_cloud).evacuate(EvacuationRequest(hosts=[SOURCE], mode="cold"))
    assert len(evac_cloud.posted) == 1


def test_on_error_revert_cancels_moves_in_flight(evac_cloud):
    from fleetflow.compute.drivers.fake_moves import MoveRules

    # Moves take a while, so the others are under way when the first server
    # runs out of hosts (it cannot live-migrate anywhere: it fails at once).
    evac_cloud.driver.move_rules = MoveRules(live_seconds=30.0)
    stuck = boot(evac_cloud)
    others = [boot(evac_cloud), boot(evac_cloud)]
    evac_cloud.runtime.compute.set_server_faults(SOURCE, stuck, live_migratable=False)
    view = ops(evac_cloud).evacuate(EvacuationRequest(
        hosts=[SOURCE], mode=states.MODE_LIVE, on_error=states.ON_ERROR_REVERT,
        max_parallel=3))
    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS
    done = ops(evac_cloud).show(view["id"])
    assert done["status"] == states.REVERTED
    statuses = {m["id"]: m["status"] for m in done["instances"]}
    assert statuses[stuck] == states.FAILED
    assert {statuses[u] for u in others} == {states.REVERTED}
    for uuid in [stuck, *others]:
        assert where(evac_cloud, uuid) == SOURCE
        assert allocations(evac_cloud, uuid) == {stable_uuid(SOURCE): RESOURCES}
        assert guest(evac_cloud, SOURCE, uuid)["state"] == states.ACTIVE
        assert evac_cloud.driver.move_count(uuid) == 0
    assert_clean(evac_cloud)


def test_a_server_being_moved_cannot_be_deleted(evac_cloud):
    from fleetflow.common.exceptions import Conflict
    from fleetflow.services.reservations import ReservationOps

    uuid = boot(evac_cloud)
    ops(evac_cloud).evacuate(EvacuationRequest(hosts=[SOURCE], mode=states.MODE_LIVE))
    servers = ReservationOps(evac_cloud.conf, evac_cloud.database, submit=evac_cloud.submit)
    with pytest.raises(Conflict):
        servers.delete_server("t1", uuid)
    with evac_cloud.database.session() as session:
        assert session.get(Instance, uuid).status == states.ACTIVE
    # Once the evacuation has ended the server can go.
    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS
    assert servers.delete_server("t1", uuid).status == states.DELETING


def test_deleting_a_server_of_a_dead_host_finishes_and_the_host_cleans_up_on_return(
        evac_cloud):
    from fleetflow.services.reservations import ReservationOps

    uuid = boot(evac_cloud)
    kill(evac_cloud, SOURCE)
    servers = ReservationOps(evac_cloud.conf, evac_cloud.database, submit=evac_cloud.submit)
    servers.delete_server("t1", uuid)
    assert evac_cloud.posted[-1]["flow"] == "reservation-teardown"
    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS
    with evac_cloud.database.session() as session:
        assert session.get(Instance, uuid).status == states.DELETED
    assert allocations(evac_cloud, uuid) == {}
    evac_cloud.runtime.compute.set_faults(SOURCE, dead=False)
    assert guest(evac_cloud, SOURCE, uuid) is None


def test_a_destination_dying_mid_move_sends_the_server_to_an_alternate(evac_cloud):
    import threading
    import time

    from fleetflow.compute.drivers.fake_moves import MoveRules

    # Long enough that the kill below lands while the move runs, even on a busy machine.
    evac_cloud.driver.move_rules = MoveRules(live_seconds=2.0)
    uuid = boot(evac_cloud)
    request = EvacuationRequest(hosts=[SOURCE], mode=states.MODE_LIVE)
    planned = ops(evac_cloud).dry_run(request)["instances"][0]["destination"]
    view = ops(evac_cloud).evacuate(request)
    outcome = []
    runner = threading.Thread(target=lambda: outcome.append(
        evac_cloud.run(evac_cloud.posted[-1])))
    runner.start()
    deadline = time.monotonic() + 30
    while ops(evac_cloud).show(view["id"])["instances"][0]["step"] != "move":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    evac_cloud.runtime.compute.set_faults(planned, dead=True)  # mid-move
    runner.join(60)
    assert outcome == [tf_states.SUCCESS]
    done = ops(evac_cloud).show(view["id"])
    assert done["status"] == states.DONE
    landed = assert_moved_once(evac_cloud, done, uuid, SOURCE)
    assert landed != planned and done["instances"][0]["hosts_tried"][0] == planned
    assert guest(evac_cloud, SOURCE, uuid) is None
    evac_cloud.runtime.compute.set_faults(planned, dead=False)
    assert guest(evac_cloud, planned, uuid) is None
    assert_clean(evac_cloud)
