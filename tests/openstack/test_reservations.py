"""Reservations on a real Nova: placed by fleetflow in one pass, booted with Nova's ``host``."""

from __future__ import annotations

from tests.openstack import checks
from tests.openstack.serve import IMAGE


def test_six_in_an_anti_affinity_group_land_on_six_nova_hosts(openstack_cloud, fleetflow_on):
    # Built in groups of four instances a task (docs/provision.md): the other
    # reservations of this layer keep one chain an instance.
    fleetflow = fleetflow_on(FLEETFLOW_CONDUCTOR_INSTANCES_PER_ATOM="4")
    conn = openstack_cloud.connection()
    group = fleetflow.group(["anti-affinity"])
    reservation = fleetflow.wait_reservation(fleetflow.reserve(6, group_id=group))
    assert reservation["status"] == "ACTIVE", reservation
    flow = fleetflow.call("GET", f"/v2/admin/flows/{reservation['flow_id']}",
                          headers={"X-Project-Id": "admin", "X-Roles": "admin"})["flow"]
    assert {"batch-0000", "batch-0004"} <= {a["name"] for a in flow["atoms"]}, flow
    servers = checks.fleetflow_servers(conn)
    assert sorted(servers) == sorted(i["id"] for i in reservation["instances"])
    assert all(len(found) == 1 for found in servers.values()), servers
    nova = [found[0] for found in servers.values()]
    assert len({checks.host_of(s) for s in nova}) == 6
    assert {i["host"] for i in reservation["instances"]} == {checks.host_of(s) for s in nova}
    # Nova owns the allocations: one per server, on its host, and no second one.
    checks.assert_one_allocation_each(conn, nova)
    # The group is Nova's too, so Nova enforces it as well.
    assert sorted(checks.group_members(conn, group)) == sorted(s["id"] for s in nova)
    # Both are the tenant's, in its own project (the harness's identity service scoped
    # fleetflow's user to it), not fleetflow's.
    assert {s["tenant_id"] for s in nova} == {"demo"}
    assert checks.nova_group(conn, group)["project_id"] == "demo"
    assert fleetflow.audit()["clean"], fleetflow.audit()

    fleetflow.call("DELETE", f"/v2/demo/reservations/{reservation['id']}")
    deleted = fleetflow.wait_reservation(reservation["id"])
    assert deleted["status"] == "DELETED", deleted
    checks.assert_nothing_left(conn)


def test_all_or_nothing_leaves_no_server_and_no_allocation(openstack_cloud, fleetflow_on):
    # fleetflow syncs once, at start: its view then says 10 hosts are up while Nova
    # takes new servers on 3 only, so boots fail in Nova, alternates too, and the
    # reservation cannot get its 6.
    fleetflow = fleetflow_on(FLEETFLOW_OPENSTACK_SYNC_INTERVAL="0")
    conn = openstack_cloud.connection()
    checks.set_enabled(conn, openstack_cloud.host_names[3:], False)
    group = fleetflow.group(["anti-affinity"])
    reservation = fleetflow.wait_reservation(fleetflow.reserve(6, group_id=group))
    assert reservation["status"] == "REVERTED", reservation
    assert any(i["fault"] for i in reservation["instances"]), reservation
    checks.assert_nothing_left(conn)
    assert fleetflow.audit()["clean"], fleetflow.audit()


def test_the_cloud_routes_that_only_a_simulation_has_say_so(fleetflow_on):
    fleetflow = fleetflow_on()
    refused = fleetflow.call("POST", "/v2/admin/hosts/host001/simulate", headers={
        "X-Project-Id": "admin", "X-Roles": "admin"}, expect=(409,),
        json={"simulate": {"dead": True}})
    assert "SIMULATED_ONLY" in str(refused)
    body = {"reservation": {"name": "v", "count": 1, "flavor_ref": "m1.tiny",
                            "image_ref": IMAGE, "volume_gb": 1}}
    refused = fleetflow.call("POST", "/v2/demo/reservations", json=body, expect=(400,))
    assert "Cinder" in str(refused)
    fleetflow.call("GET", "/placement/", expect=(404,))
