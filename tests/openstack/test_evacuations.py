"""Host evacuations on a real Nova: destinations chosen in one pass, moves done by Nova.

Four servers of an anti-affinity group (at most 2 a host) live in a pool of three
hosts (an aggregate whose metadata fleetflow's sync turns into a capability); the
evacuated host is the one with two of them, so the two that move must go one to
each of the two others, which only a placement that sees both moves at once gets
right every time.
"""

from __future__ import annotations

import collections

import pytest

from tests.openstack import checks

POOL = ("host000", "host001", "host002")


def _pooled_servers(openstack_cloud, fleetflow_on, **settings):
    conn = openstack_cloud.connection()
    checks.pool(conn, "pool-a", POOL, pool="a")
    fleetflow = fleetflow_on(**settings)
    group = fleetflow.group(["anti-affinity"], max_per_host=2)
    reservation = fleetflow.wait_reservation(fleetflow.reserve(
        4, group_id=group, capabilities={"pool": "a"}))
    assert reservation["status"] == "ACTIVE", reservation
    per_host = collections.Counter(i["host"] for i in reservation["instances"])
    source = per_host.most_common(1)[0][0]
    assert per_host[source] == 2, per_host
    return conn, fleetflow, group, source


def _assert_moved_off(conn, fleetflow, group, source):
    servers = checks.fleetflow_servers(conn)
    assert len(servers) == 4 and all(len(found) == 1 for found in servers.values()), servers
    nova = [found[0] for found in servers.values()]
    assert all(s["status"] == "ACTIVE" for s in nova), [s["status"] for s in nova]
    hosts = collections.Counter(checks.host_of(s) for s in nova)
    assert source not in hosts, hosts
    assert max(hosts.values()) <= 2, hosts  # the group's rule held through the moves
    checks.assert_one_allocation_each(conn, nova)
    checks.assert_no_migration_allocations(conn)
    assert sorted(checks.group_members(conn, group)) == sorted(s["id"] for s in nova)
    audit = fleetflow.audit()
    assert audit["clean"], audit


@pytest.mark.parametrize("mode", ["live", "cold", "drain"])
def test_a_maintenance_evacuation_moves_every_server(openstack_cloud, fleetflow_on, mode):
    conn, fleetflow, group, source = _pooled_servers(openstack_cloud, fleetflow_on)
    evacuation = fleetflow.wait_evacuation(fleetflow.evacuate([source], mode))
    assert evacuation["status"] == "DONE", evacuation
    assert evacuation["progress"]["done"] == 2
    _assert_moved_off(conn, fleetflow, group, source)
    # Nova schedules nothing new on the evacuated host.
    service = next(s for s in conn.compute.services(binary="nova-compute")
                   if s.host == source)
    assert service.status == "disabled"


def test_a_rebuild_fences_the_dead_host_and_rebuilds_elsewhere(openstack_cloud, fleetflow_on):
    conn, fleetflow, group, source = _pooled_servers(
        openstack_cloud, fleetflow_on, FLEETFLOW_OPENSTACK_SYNC_INTERVAL="1")
    openstack_cloud.stop_host(source)
    openstack_cloud.wait_for_service_state(conn, source, "down")
    checks.wait(lambda: next(h for h in fleetflow.call(
        "GET", "/v2/admin/hosts", headers={"X-Project-Id": "admin", "X-Roles": "admin"}
    )["hosts"] if h["name"] == source)["state"] == "down", what=f"{source} synced down")
    evacuation = fleetflow.wait_evacuation(fleetflow.evacuate([source], "rebuild"))
    assert evacuation["status"] == "DONE", evacuation
    _assert_moved_off(conn, fleetflow, group, source)
    service = next(s for s in conn.compute.services(binary="nova-compute")
                   if s.host == source)
    assert service.is_forced_down and service.status == "disabled"


def test_a_paused_evacuation_resumes_skips_or_reverts(openstack_cloud, fleetflow_on):
    # fleetflow's view is the one synced at start; the two other pool hosts are then
    # disabled in Nova, so every move Nova is asked for fails and the evacuation pauses.
    conn, fleetflow, group, source = _pooled_servers(
        openstack_cloud, fleetflow_on, FLEETFLOW_OPENSTACK_SYNC_INTERVAL="0")
    others = [h for h in POOL if h != source]
    checks.set_enabled(conn, others, False)
    admin = {"X-Project-Id": "admin", "X-Roles": "admin"}
    paused = fleetflow.wait_evacuation(fleetflow.evacuate([source], "live"))
    assert paused["status"] == "PAUSED", paused
    assert paused["progress"]["failed"] >= 1
    still = checks.fleetflow_servers(conn)
    assert sum(checks.host_of(s[0]) == source for s in still.values()) == 2

    # Resumed once the hosts take servers again: every server moves.
    checks.set_enabled(conn, others, True)
    fleetflow.call("POST", f"/v2/admin/evacuations/{paused['id']}/resume", headers=admin,
                   json={})
    done = fleetflow.wait_evacuation(paused["id"])
    assert done["status"] == "DONE", done
    _assert_moved_off(conn, fleetflow, group, source)


@pytest.mark.parametrize("decision", ["skip", "revert"])
def test_a_paused_evacuation_skipped_or_reverted_leaves_servers_where_they_are(
        openstack_cloud, fleetflow_on, decision):
    conn, fleetflow, group, source = _pooled_servers(
        openstack_cloud, fleetflow_on, FLEETFLOW_OPENSTACK_SYNC_INTERVAL="0")
    checks.set_enabled(conn, [h for h in POOL if h != source], False)
    admin = {"X-Project-Id": "admin", "X-Roles": "admin"}
    paused = fleetflow.wait_evacuation(fleetflow.evacuate([source], "live"))
    assert paused["status"] == "PAUSED", paused
    body = {}
    if decision == "skip":
        body = {"skip": {"instances": [i["id"] for i in paused["instances"]
                                       if i["status"] != "DONE"]}}
    fleetflow.call("POST", f"/v2/admin/evacuations/{paused['id']}/{decision}",
                   headers=admin, json=body)
    ended = fleetflow.wait_evacuation(paused["id"])
    assert ended["status"] == ("PARTIAL" if decision == "skip" else "REVERTED"), ended
    servers = checks.fleetflow_servers(conn)
    nova = [found[0] for found in servers.values()]
    assert sum(checks.host_of(s) == source for s in nova) == 2
    assert all(s["status"] == "ACTIVE" for s in nova)
    checks.assert_one_allocation_each(conn, nova)
    assert fleetflow.audit()["clean"], fleetflow.audit()
