"""``kill -9`` of fleetflow mid-flow, on a real Nova: the restart finishes the flow with
neither a second server nor a lost one.

What makes it hold: a boot looks for the server tagged with its instance before it
creates one, and a move finds its try by the tag of its migration id
(docs/openstack.md, "Guarantees").
"""

from __future__ import annotations

import collections

from tests.openstack import checks
from tests.openstack.test_evacuations import POOL


def _one_server_each(conn, expected: int) -> list[dict]:
    servers = checks.fleetflow_servers(conn)
    assert len(servers) == expected, servers
    assert all(len(found) == 1 for found in servers.values()), servers
    return [found[0] for found in servers.values()]


def test_killed_mid_reservation_it_finishes_with_one_server_each(openstack_cloud,
                                                                 fleetflow_on):
    fleetflow = fleetflow_on()
    conn = openstack_cloud.connection()
    reservation_id = fleetflow.reserve(8)
    # Killed once Nova has some of the servers and before it has them all ACTIVE.
    checks.wait(lambda: len(checks.fleetflow_servers(conn)) >= 2, what="boots under way")
    fleetflow.kill()
    assert fleetflow.status_in_database("reservations", reservation_id) in (
        "SCHEDULING", "BUILDING")
    fleetflow.start()
    reservation = fleetflow.wait_reservation(reservation_id)
    assert reservation["status"] == "ACTIVE", reservation
    servers = _one_server_each(conn, 8)
    assert sorted(s["metadata"]["fleetflow_instance"] for s in servers) == sorted(
        i["id"] for i in reservation["instances"])
    assert all(s["status"] == "ACTIVE" for s in servers)
    checks.assert_one_allocation_each(conn, servers)
    assert fleetflow.audit()["clean"], fleetflow.audit()


def test_killed_mid_evacuation_it_finishes_every_move_once(openstack_cloud, fleetflow_on):
    conn = openstack_cloud.connection()
    checks.pool(conn, "pool-a", POOL, pool="a")
    fleetflow = fleetflow_on()
    group = fleetflow.group(["anti-affinity"], max_per_host=3)
    reservation = fleetflow.wait_reservation(fleetflow.reserve(
        6, group_id=group, capabilities={"pool": "a"}))
    assert reservation["status"] == "ACTIVE", reservation
    source = collections.Counter(
        i["host"] for i in reservation["instances"]).most_common(1)[0][0]
    evacuation_id = fleetflow.evacuate([source], "cold")
    # Killed once Nova is moving some of them (a cold move's try is tagged first).
    checks.wait(lambda: any(any(t.startswith("fleetflow-move:") for t in found[0]["tags"])
                            for found in checks.fleetflow_servers(conn).values()),
                what="a move under way")
    fleetflow.kill()
    assert fleetflow.status_in_database("evacuations", evacuation_id) == "RUNNING"
    fleetflow.start()
    evacuation = fleetflow.wait_evacuation(evacuation_id)
    assert evacuation["status"] == "DONE", evacuation
    servers = _one_server_each(conn, 6)
    hosts = collections.Counter(checks.host_of(s) for s in servers)
    assert source not in hosts and max(hosts.values()) <= 3, hosts
    assert all(s["status"] == "ACTIVE" for s in servers), [s["status"] for s in servers]
    checks.assert_one_allocation_each(conn, servers)
    checks.assert_no_migration_allocations(conn)
    assert fleetflow.audit()["clean"], fleetflow.audit()
