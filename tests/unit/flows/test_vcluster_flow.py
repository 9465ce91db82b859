"""The vcluster flows on TaskFlow's in-memory backend, against the real small cloud.

The two examples of docs/vcluster.md, failures absorbed by alternates, the all-or-nothing
revert (nothing held afterwards: the audit is clean), updates and delete.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.exceptions import Conflict, InvalidInput
from fleetflow.flows.vcluster.build import build_flow
from fleetflow.flows.vcluster.teardown import teardown_flow
from fleetflow.persistence.models import GroupMember, ServerGroup, Volume
from fleetflow.services.vclusters import VClusterOps, VClusterRequest

IMAGE = "cirros"


def server(name: str, flavor: str = "m1.small", **spec) -> dict:
    return {"name": name, "type": "server", "spec": {"imageRef": IMAGE, "flavorRef": flavor,
                                                     **spec}}


def volume(name: str, size: int = 10, volume_type: str | None = None, **spec) -> dict:
    body = {"size": size, **spec}
    if volume_type is not None:
        body["volume_type"] = volume_type
    return {"name": name, "type": "volume", "spec": body}


def grouping(name: str, members: list[str], rule: str, scope: str | None = None) -> dict:
    spec = {"rule": rule} | ({"scope": scope} if scope else {})
    return {"name": name, "membersRef": members, "spec": spec}


# Two servers apart, each with its volume beside it (the second example of docs/vcluster.md).
TWO_SERVERS_APART = {
    "instances": [server("db-server-1"), volume("db-vol-1"), server("db-server-2"),
                  volume("db-vol-2")],
    "groupings": [grouping("group-1", ["db-server-1", "db-vol-1"], "affinity"),
                  grouping("group-2", ["db-server-2", "db-vol-2"], "affinity"),
                  grouping("group-3", ["db-server-1", "db-server-2"], "anti-affinity"),
                  grouping("group-4", ["db-vol-1", "db-vol-2"], "anti-affinity")],
}


def ops(cloud) -> VClusterOps:
    return VClusterOps(cloud.conf, cloud.database, submit=cloud.submit)


def create(cloud, body: dict, name: str = "db", tenant: str = "t1") -> str:
    req = VClusterRequest(tenant_id=tenant, user_id="u1", name=name,
                          instances=body["instances"], groupings=body.get("groupings", []))
    vcluster, created = ops(cloud).create(req)
    assert created
    return vcluster.id


def run_last(cloud) -> str:
    return cloud.run(cloud.posted[-1])


def show(cloud, vcluster_id: str) -> dict:
    return ops(cloud).show(None, vcluster_id)


def members(view: dict) -> dict[str, dict]:
    return {m["name"]: m for m in view["instances"]}


def assert_clean(cloud) -> None:
    from fleetflow.services.audit.report import audit

    report = audit(cloud.database, cloud.runtime.placement, cloud.runtime.compute,
                   strict=True)
    assert report.clean, report.summary()


def assert_nothing_held(cloud, view: dict) -> None:
    for member in view["instances"]:
        assert cloud.runtime.placement.get_allocations(member["id"]).allocations == {}


def break_every_host(cloud) -> None:
    from fleetflow.persistence.models import Host

    with cloud.database.session() as session:
        names = list(session.scalars(sa.select(Host.name)))
    for host in names:
        cloud.driver.set_faults(host, fail_next=5)


def test_contract_every_requirement_is_provided_or_in_the_store():
    flow = build_flow("vc-x", "create", [{"index": 0, "name": "a", "id": "i", "resources":
                                          {"VCPU": 1}, "image_id": "img"}],
                      [{"index": 0, "name": "v", "id": "v", "size_gb": 1}])
    store = {"vcluster_id", "tenant_id", "vcluster_run", "flow_id", "fence"}
    provided = set(store)
    for atom in _atoms(flow):
        provided |= set(atom.provides)
    for atom in _atoms(flow):
        missing = set(atom.requires) - provided
        assert not missing, (atom.name, missing)
    teardown = teardown_flow("vc-x", "delete", [{"index": 0, "id": "i"}],
                             [{"index": 0, "id": "v"}])
    for atom in _atoms(teardown):
        assert set(atom.requires) <= store, atom.name


def _atoms(flow):
    from taskflow import flow as tf_flow

    for item in flow:
        if isinstance(item, tf_flow.Flow):
            if item.retry is not None:
                yield item.retry
            yield from _atoms(item)
        else:
            yield item


def test_a_server_with_its_volume_builds_with_the_volume_attached(evac_cloud):
    body = {"instances": [server("db-server-1"), volume("db-vol-1")],
            "groupings": [grouping("group-1", ["db-server-1", "db-vol-1"], "affinity")]}
    vcluster_id = create(evac_cloud, body)
    assert run_last(evac_cloud) == "SUCCESS"
    view = show(evac_cloud, vcluster_id)
    assert view["status"] == states.ACTIVE
    found = members(view)
    assert found["db-server-1"]["status"] == states.ACTIVE
    assert found["db-vol-1"]["status"] == states.VOLUME_IN_USE
    assert found["db-vol-1"]["attached_to"] == "db-server-1"
    assert view["groupings"][0]["satisfied"] is True
    assert view["progress"] == {"total": 2, "active": 2, "building": 0, "error": 0}
    assert evac_cloud.driver.volume_create_count(found["db-vol-1"]["id"]) == 1
    assert_clean(evac_cloud)


def test_two_servers_apart_with_their_volumes_hold_every_grouping(evac_cloud):
    vcluster_id = create(evac_cloud, TWO_SERVERS_APART)
    assert run_last(evac_cloud) == "SUCCESS"
    view = show(evac_cloud, vcluster_id)
    found = members(view)
    assert view["status"] == states.ACTIVE
    assert found["db-server-1"]["host"] != found["db-server-2"]["host"]
    assert found["db-vol-1"]["backend"] != found["db-vol-2"]["backend"]
    assert all(g["satisfied"] for g in view["groupings"]), view["groupings"]
    # The server-server rule is a real server group owned by the cluster.
    with evac_cloud.database.session() as session:
        group = session.execute(sa.select(ServerGroup).where(
            ServerGroup.vcluster_id == vcluster_id)).scalar_one()
        assert group.policies == ["anti-affinity"]
        assert {m.instance_id for m in session.scalars(sa.select(GroupMember).where(
            GroupMember.group_id == group.id))} == {found["db-server-1"]["id"],
                                                     found["db-server-2"]["id"]}
    assert_clean(evac_cloud)


def test_a_failed_boot_moves_to_an_alternate(evac_cloud):
    body = {"instances": [server("a"), server("b")],
            "groupings": [grouping("g", ["a", "b"], "anti-affinity")]}
    dry = ops(evac_cloud).dry_run(VClusterRequest("t1", "u1", "x", body["instances"],
                                                  body["groupings"]))
    first = next(i for i in dry["instances"] if i["name"] == "a")["host"]
    evac_cloud.driver.set_faults(first, fail_next=1)
    vcluster_id = create(evac_cloud, body)
    assert run_last(evac_cloud) == "SUCCESS"
    found = members(show(evac_cloud, vcluster_id))
    assert found["a"]["host"] != first
    assert found["a"]["host"] != found["b"]["host"]
    assert_clean(evac_cloud)


def test_a_failed_volume_create_moves_to_an_alternate_backend(evac_cloud):
    body = {"instances": [volume("v", volume_type="ssd")]}
    dry = ops(evac_cloud).dry_run(VClusterRequest("t1", "u1", "x", body["instances"], []))
    first = dry["instances"][0]["backend"]
    evac_cloud.driver.set_backend_faults(first, fail_next_creates=1)
    vcluster_id = create(evac_cloud, body)
    assert run_last(evac_cloud) == "SUCCESS"
    found = members(show(evac_cloud, vcluster_id))
    assert found["v"]["backend"] not in (None, first)
    assert found["v"]["status"] == states.VOLUME_AVAILABLE
    assert_clean(evac_cloud)


def test_out_of_alternates_reverts_everything(evac_cloud):
    vcluster_id = create(evac_cloud, TWO_SERVERS_APART)
    break_every_host(evac_cloud)
    assert run_last(evac_cloud) == "REVERTED"
    view = show(evac_cloud, vcluster_id)
    assert view["status"] == states.REVERTED
    assert view["fault"] is not None
    assert_nothing_held(evac_cloud, view)
    with evac_cloud.database.session() as session:
        assert not session.scalars(sa.select(ServerGroup).where(
            ServerGroup.vcluster_id == vcluster_id)).all()
        volumes = session.scalars(sa.select(Volume).where(
            Volume.vcluster_id == vcluster_id)).all()
        assert {v.status for v in volumes} == {states.VOLUME_DELETED}
    assert_clean(evac_cloud)


def test_no_room_fails_fast_naming_the_grouping(evac_cloud):
    body = {"instances": [server(f"s{i}") for i in range(9)],
            "groupings": [grouping("spread", [f"s{i}" for i in range(9)], "anti-affinity")]}
    vcluster_id = create(evac_cloud, body)
    assert run_last(evac_cloud) == "REVERTED"
    view = show(evac_cloud, vcluster_id)
    assert view["status"] == states.REVERTED
    assert view["fault"]["code"] == "NO_VALID_HOST"
    assert "spread" in view["fault"]["message"]
    assert_clean(evac_cloud)


def test_contradictions_are_refused_before_anything_is_written(evac_cloud):
    body = {"instances": [server("a"), server("b")],
            "groupings": [grouping("together", ["a", "b"], "affinity"),
                          grouping("apart", ["a", "b"], "anti-affinity")]}
    with pytest.raises(InvalidInput):
        create(evac_cloud, body)
    assert evac_cloud.posted == []


def test_add_then_remove_members(evac_cloud):
    vcluster_id = create(evac_cloud, TWO_SERVERS_APART)
    assert run_last(evac_cloud) == "SUCCESS"
    ops(evac_cloud).add("t1", vcluster_id, [server("db-server-3"), volume("db-vol-3")],
                        [grouping("group-5", ["db-server-3", "db-vol-3"], "affinity"),
                         grouping("group-3", ["db-server-3"], "anti-affinity")])
    assert show(evac_cloud, vcluster_id)["status"] == states.UPDATING
    with pytest.raises(Conflict):
        ops(evac_cloud).remove("t1", vcluster_id, "db-vol-1")
    assert run_last(evac_cloud) == "SUCCESS"
    view = show(evac_cloud, vcluster_id)
    found = members(view)
    assert view["status"] == states.ACTIVE
    assert len({found[f"db-server-{i}"]["host"] for i in (1, 2, 3)}) == 3
    assert found["db-vol-3"]["attached_to"] == "db-server-3"
    assert all(g["satisfied"] for g in view["groupings"]), view["groupings"]
    assert_clean(evac_cloud)

    ops(evac_cloud).remove("t1", vcluster_id, "db-server-1")
    assert run_last(evac_cloud) == "SUCCESS"
    view = show(evac_cloud, vcluster_id)
    found = members(view)
    assert "db-server-1" not in found
    assert found["db-vol-1"]["attached_to"] is None
    assert found["db-vol-1"]["status"] == states.VOLUME_AVAILABLE
    group_3 = next(g for g in view["groupings"] if g["name"] == "group-3")
    assert group_3["membersRef"] == ["db-server-2", "db-server-3"]
    assert_clean(evac_cloud)


def test_a_failed_add_leaves_the_cluster_as_it_was(evac_cloud):
    vcluster_id = create(evac_cloud, TWO_SERVERS_APART)
    assert run_last(evac_cloud) == "SUCCESS"
    before = show(evac_cloud, vcluster_id)
    break_every_host(evac_cloud)
    ops(evac_cloud).add("t1", vcluster_id, [server("db-server-3")],
                        [grouping("group-3", ["db-server-3"], "anti-affinity")])
    assert run_last(evac_cloud) == "REVERTED"
    after = show(evac_cloud, vcluster_id)
    assert after["status"] == states.ACTIVE
    assert after["fault"] is not None
    assert [m["name"] for m in after["instances"]] == [m["name"] for m in before["instances"]]
    assert after["groupings"] == before["groupings"]
    assert_clean(evac_cloud)


def test_delete_takes_everything_down(evac_cloud):
    vcluster_id = create(evac_cloud, TWO_SERVERS_APART)
    assert run_last(evac_cloud) == "SUCCESS"
    view = show(evac_cloud, vcluster_id)
    ops(evac_cloud).delete("t1", vcluster_id)
    assert run_last(evac_cloud) == "SUCCESS"
    after = show(evac_cloud, vcluster_id)
    assert after["status"] == states.DELETED
    assert {m["status"] for m in after["instances"]} == {states.DELETED}
    assert_nothing_held(evac_cloud, view)
    with evac_cloud.database.session() as session:
        assert not session.scalars(sa.select(ServerGroup).where(
            ServerGroup.vcluster_id == vcluster_id)).all()
    assert_clean(evac_cloud)


def test_delete_goes_through_when_a_server_host_is_dead(evac_cloud):
    vcluster_id = create(evac_cloud, TWO_SERVERS_APART)
    assert run_last(evac_cloud) == "SUCCESS"
    found = members(show(evac_cloud, vcluster_id))
    evac_cloud.driver.set_faults(found["db-server-1"]["host"], dead=True)
    ops(evac_cloud).delete("t1", vcluster_id)
    assert run_last(evac_cloud) == "SUCCESS"
    assert show(evac_cloud, vcluster_id)["status"] == states.DELETED


def test_an_evacuation_keeps_every_group_of_a_cluster_server(evac_cloud):
    from fleetflow.services.evacuations import EvacuationOps, EvacuationRequest

    body = {"instances": [server("a"), server("b"), server("c"), volume("va", volume_type="ssd")],
            "groupings": [grouping("ab", ["a", "b"], "anti-affinity"),
                          grouping("ac", ["a", "c"], "anti-affinity", scope="rack"),
                          grouping("a-va", ["a", "va"], "affinity")]}
    vcluster_id = create(evac_cloud, body)
    assert run_last(evac_cloud) == "SUCCESS"
    source = members(show(evac_cloud, vcluster_id))["a"]["host"]
    evacuations = EvacuationOps(evac_cloud.conf, evac_cloud.database, submit=evac_cloud.submit,
                                compute=evac_cloud.runtime.compute)
    evacuations.evacuate(EvacuationRequest(hosts=[source], mode=states.MODE_LIVE))
    assert evac_cloud.run(evac_cloud.posted[-1]) == "SUCCESS"
    view = show(evac_cloud, vcluster_id)
    found = members(view)
    assert found["a"]["host"] != source
    assert found["va"]["attached_to"] == "a"
    assert all(g["satisfied"] for g in view["groupings"]), view["groupings"]
    with evac_cloud.database.session() as session:
        hosts = {m.host for m in session.scalars(sa.select(GroupMember).where(
            GroupMember.instance_id == found["a"]["id"]))}
    assert hosts == {found["a"]["host"]}
    assert_clean(evac_cloud)


def test_a_cluster_server_being_moved_or_deleted_alone_is_refused(evac_cloud):
    from fleetflow.persistence.models import Instance
    from fleetflow.services.reservations import ReservationOps

    vcluster_id = create(evac_cloud, TWO_SERVERS_APART)
    assert run_last(evac_cloud) == "SUCCESS"
    found = members(show(evac_cloud, vcluster_id))
    server_id = found["db-server-1"]["id"]
    posted = len(evac_cloud.posted)
    # Its own delete would leave the cluster with a hole the cluster does not know.
    with pytest.raises(Conflict, match=vcluster_id):
        ReservationOps(evac_cloud.conf, evac_cloud.database,
                   submit=evac_cloud.submit).delete_server("t1", server_id)
    with evac_cloud.database.session() as session:
        session.execute(sa.update(Instance).where(Instance.id == server_id)
                        .values(task_state=states.TASK_MIGRATING))
    for change in (lambda: ops(evac_cloud).delete("t1", vcluster_id),
                   lambda: ops(evac_cloud).remove("t1", vcluster_id, "db-server-1")):
        with pytest.raises(Conflict, match="being moved"):
            change()
    view = show(evac_cloud, vcluster_id)
    assert view["status"] == states.ACTIVE
    assert {m["status"] for m in view["instances"] if m["type"] == "server"} == {
        states.ACTIVE}
    assert len(evac_cloud.posted) == posted
