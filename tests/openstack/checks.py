"""What the openstack tests look at in the cloud itself: Nova's servers, Placement's
allocations and Nova's server groups, read with a stock openstacksdk client."""

from __future__ import annotations

import collections
import time

MICROVERSION = "2.94"

#: Nova's servers that were there when the test began: a previous test's, which Nova
#: was still deleting (tests/openstack/conftest.py sets it for each test).
_BEFORE_THE_TEST: frozenset[str] = frozenset()


def ignore_servers(server_ids) -> None:
    """Leave these servers out of :func:`fleetflow_servers` (they are not the test's)."""
    global _BEFORE_THE_TEST
    _BEFORE_THE_TEST = frozenset(server_ids)


def fleetflow_servers(conn) -> dict[str, list[dict]]:
    """fleetflow instance uuid -> Nova's servers tagged with it (more than one is a bug).

    Only the servers made since the test began: one a previous test left, which Nova
    is still deleting, is not counted.
    """
    found = collections.defaultdict(list)
    servers = conn.compute.get("/servers/detail", params={"all_tenants": "1"},
                               microversion=MICROVERSION).json()["servers"]
    for server in servers:
        uuid = (server.get("metadata") or {}).get("fleetflow_instance")
        if uuid and server["id"] not in _BEFORE_THE_TEST:
            found[uuid].append(server)
    return dict(found)


def host_of(server: dict) -> str:
    return server["OS-EXT-SRV-ATTR:host"]


def providers(conn) -> dict[str, str]:
    """Each compute node's provider uuid -> its host."""
    hypervisors = conn.compute.get("/os-hypervisors/detail",
                                   microversion=MICROVERSION).json()["hypervisors"]
    return {h["id"]: h["service"]["host"] for h in hypervisors}


def allocations(conn, consumer: str) -> dict:
    return conn.placement.get(f"/allocations/{consumer}",
                              microversion="1.28").json()["allocations"]


def assert_one_allocation_each(conn, servers: list[dict]) -> None:
    """Every server holds exactly one allocation in the cloud's Placement, on its host."""
    hosts_of = providers(conn)
    for server in servers:
        held = allocations(conn, server["id"])
        assert [hosts_of[rp] for rp in held] == [host_of(server)], (server["id"], held)


def assert_no_migration_allocations(conn) -> None:
    migrations = conn.compute.get("/os-migrations", microversion=MICROVERSION).json()
    for migration in migrations["migrations"]:
        assert allocations(conn, migration["uuid"]) == {}, migration


def assert_nothing_left(conn) -> None:
    """No server fleetflow made, and no allocation of any consumer, remain."""
    assert fleetflow_servers(conn) == {}
    usages = conn.placement.get("/usages", params={"project_id": "admin"},
                                microversion="1.28").json()["usages"]
    assert not any(usages.values()), usages


def nova_group(conn, group_id: str) -> dict:
    """The Nova server group backing fleetflow group ``group_id``."""
    groups = conn.compute.get("/os-server-groups", params={"all_projects": "True"},
                              microversion="2.64").json()["server_groups"]
    return next(g for g in groups if g["name"] == f"fleetflow-{group_id}")


def group_members(conn, group_id: str) -> list[str]:
    return nova_group(conn, group_id)["members"]


def pool(conn, name: str, hosts, **metadata) -> None:
    """An aggregate of ``hosts`` whose metadata fleetflow's sync makes capabilities."""
    aggregate = conn.compute.create_aggregate(name=name)
    for host in hosts:
        conn.compute.add_host_to_aggregate(aggregate, host)
    conn.compute.set_aggregate_metadata(aggregate, metadata)


def set_enabled(conn, hosts, enabled: bool) -> None:
    for service in conn.compute.services(binary="nova-compute"):
        if service.host in hosts:
            if enabled:
                conn.compute.enable_service(service)
            else:
                conn.compute.disable_service(service, disabled_reason="test")


def wait(predicate, timeout: float = 60, what: str = ""):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"not after {timeout} s: {what}"
        time.sleep(0.3)
