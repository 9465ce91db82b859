"""The harness serves a real Nova and Placement to a stock openstacksdk client.

What fleetflow's OpenStack driver relies on, seen from outside over HTTP: the hypervisors,
a server booted onto the host asked for and its one allocation there, a stopped host read
down by os-services and up again once started, the allocation gone with the server.
"""

from __future__ import annotations

import concurrent.futures

import yaml

#: In the Glance fixture's images.
IMAGE_ID = "155d900f-4e14-4e4c-a73d-069cbf4541e6"
#: ``host`` in a server's create body needs 2.74; allocations with their consumer's
#: project and generation need Placement 1.28.
PLACEMENT_MICROVERSION = "1.28"


def _provider_of(conn, host):
    answer = conn.placement.get(f"/resource_providers?name={host}")
    [provider] = answer.json()["resource_providers"]
    return provider["uuid"]


def _allocations(conn, server_id):
    answer = conn.placement.get(f"/allocations/{server_id}",
                                microversion=PLACEMENT_MICROVERSION)
    return answer.json()["allocations"]


def test_clouds_yaml_names_the_harness(openstack_cloud):
    with open(openstack_cloud.clouds_yaml) as written:
        entry = yaml.safe_load(written)["clouds"][openstack_cloud.cloud_name]
    assert entry["auth_type"] == "v3password"
    assert entry["auth"]["auth_url"] == openstack_cloud.compute_url + "/identity/v3"
    assert entry["compute_endpoint_override"] == openstack_cloud.compute_url + "/v2.1"
    assert entry["placement_endpoint_override"].rstrip("/") == openstack_cloud.placement_url


def test_the_same_user_scoped_to_another_project_works_in_it(openstack_cloud):
    conn = openstack_cloud.connection()
    assert conn.current_project_id == "admin"
    tenant = conn.connect_as_project({"id": "tenant-a"})
    assert tenant.current_project_id == "tenant-a"
    group = tenant.compute.create_server_group(name="scoped", policy="anti-affinity")
    try:
        listed = {g.id: g.project_id for g in conn.compute.server_groups(all_projects=True)}
        assert listed[group.id] == "tenant-a"
    finally:
        conn.compute.delete_server_group(group)


def test_every_host_is_a_hypervisor_and_an_up_compute(openstack_cloud):
    conn = openstack_cloud.connection()
    hypervisors = sorted(h.name for h in conn.compute.hypervisors())
    assert hypervisors == openstack_cloud.host_names
    services = {s.host: (s.state, s.status) for s in conn.compute.services(binary="nova-compute")}
    assert services == {host: ("up", "enabled") for host in openstack_cloud.host_names}


def test_a_server_asked_on_a_host_boots_there_with_one_allocation(openstack_cloud):
    conn = openstack_cloud.connection()
    flavor = next(f for f in conn.compute.flavors() if f.name == "m1.small")
    server = conn.compute.create_server(name="on-host003", flavor_id=flavor.id,
                                        image_id=IMAGE_ID, networks="none", host="host003")
    server = conn.compute.wait_for_server(server, wait=60)
    assert (server.status, server.compute_host) == ("ACTIVE", "host003")

    allocations = _allocations(conn, server.id)
    host003 = _provider_of(conn, "host003")
    assert list(allocations) == [host003]
    assert allocations[host003]["resources"] == {
        "VCPU": flavor.vcpus, "MEMORY_MB": flavor.ram, "DISK_GB": flavor.disk}

    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, wait=60)
    assert _allocations(conn, server.id) == {}


def test_a_stopped_host_reads_down_and_up_again_once_started(openstack_cloud):
    conn = openstack_cloud.connection()
    assert openstack_cloud.stop_host("host005") == {"host005": "stopped"}
    openstack_cloud.wait_for_service_state(conn, "host005", "down")
    # Only the stopped host: the others keep beating.
    states = {s.host: s.state for s in conn.compute.services(binary="nova-compute")}
    assert [host for host, state in states.items() if state == "down"] == ["host005"]
    assert openstack_cloud.hosts()["host005"] == "stopped"

    assert openstack_cloud.start_host("host005") == {"host005": "up"}
    openstack_cloud.wait_for_service_state(conn, "host005", "up")
    assert openstack_cloud.hosts()["host005"] == "up"


def test_concurrent_creates_all_go_active(openstack_cloud):
    # Nova's cell fixture deadlocked the API under concurrent requests until the harness
    # replaced its global cell switching: several clients at once is what fleetflow does.
    flavor = next(f for f in openstack_cloud.connection().compute.flavors()
                  if f.name == "m1.tiny")

    def boot(index):
        conn = openstack_cloud.connection()
        server = conn.compute.create_server(
            name=f"concurrent-{index}", flavor_id=flavor.id, image_id=IMAGE_ID,
            networks="none", host=openstack_cloud.host_names[index])
        server = conn.compute.wait_for_server(server, wait=120)
        return server.status, server.compute_host

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        booted = list(pool.map(boot, range(6)))
    assert booted == [("ACTIVE", host) for host in openstack_cloud.host_names[:6]]
