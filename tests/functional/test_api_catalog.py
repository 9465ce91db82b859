"""Admin host routes and the flavor / image catalog over the Flask test client."""

from __future__ import annotations

import urllib.parse

import pytest
import sqlalchemy as sa

from fleetflow.persistence.models import Host


def host_row(db, name):
    with db.session() as session:
        return session.scalars(sa.select(Host).where(Host.name == name)).one()


def follow(client, headers, url, key):
    """Every item of a paginated list, and how many pages it took."""
    items, pages = [], 0
    while url:
        body = client.get(url, headers=headers).get_json()
        pages += 1
        items += body[key]
        nexts = [link["href"] for link in body["links"] if link["rel"] == "next"]
        assert len(nexts) <= 1
        url = nexts[0].replace("http://localhost", "") if nexts else None
    return items, pages


# -- hosts ------------------------------------------------------------------------

def test_host_list_shows_topology_inventory_capabilities(client, admin_headers,
                                                         sample_catalog):
    response = client.get("/v2/admin/hosts", headers=admin_headers)
    assert response.status_code == 200
    body = response.get_json()
    assert [h["name"] for h in body["hosts"]] == ["host-001", "host-002", "host-003"]
    assert body["links"] == []
    first = body["hosts"][0]
    assert first["topology"] == {"region": "north-america", "zone": "na-1", "rack": "r1"}
    assert first["inventory"]["VCPU"] == {"total": 64, "allocation_ratio": 4.0, "reserved": 0}
    assert first["capabilities"] == {"region": "north-america", "gpu": "true",
                                     "sticker": "blue"}
    assert first["traits"] == ["HW_CPU_X86_AVX2"]
    assert first["state"] == "up" and first["reason"] is None
    assert first["uuid"].endswith("000000000001")


@pytest.mark.parametrize("query, expected", [
    ("region=north-america", ["host-001", "host-002"]),
    ("region=europe", ["host-003"]),
    ("rack=r1", ["host-001", "host-003"]),
    ("region=north-america&rack=r2", ["host-002"]),
    ("state=up", ["host-001", "host-002", "host-003"]),
    ("state=maintenance", []),
    ("region=atlantis", []),
])
def test_host_list_filters(client, admin_headers, sample_catalog, query, expected):
    body = client.get(f"/v2/admin/hosts?{query}", headers=admin_headers).get_json()
    assert [h["name"] for h in body["hosts"]] == expected


def test_host_list_unknown_state_filter_is_400(client, admin_headers):
    response = client.get("/v2/admin/hosts?state=asleep", headers=admin_headers)
    assert response.status_code == 400
    assert "'state'" in response.get_json()["errors"][0]["detail"]


def test_host_list_pages_with_limit_and_marker(client, admin_headers, sample_catalog):
    body = client.get("/v2/admin/hosts?limit=2&region=north-america",
                      headers=admin_headers).get_json()
    # Exactly two match: a full page but nothing after it means no next link.
    assert len(body["hosts"]) == 2 and body["links"] == []
    first = client.get("/v2/admin/hosts?limit=2", headers=admin_headers).get_json()
    (link,) = first["links"]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(link["href"]).query)
    assert query == {"limit": ["2"], "marker": ["host-002"]}
    names, pages = follow(client, admin_headers, "/v2/admin/hosts?limit=1", "hosts")
    assert names and [h["name"] for h in names] == ["host-001", "host-002", "host-003"]
    assert pages == 3
    # A marker that names no host is refused, as in OpenStack's APIs.
    after = client.get("/v2/admin/hosts?marker=host-0015", headers=admin_headers)
    assert after.status_code == 400 and "'marker'" in after.get_json()["errors"][0]["detail"]
    # One whose state changed since is still a host: the next page starts after it.
    client.put("/v2/admin/hosts/host-001", json={"host": {"state": "maintenance"}},
               headers=admin_headers)
    after = client.get("/v2/admin/hosts?state=up&marker=host-001", headers=admin_headers)
    assert [h["name"] for h in after.get_json()["hosts"]] == ["host-002", "host-003"]


def test_host_list_uses_the_configured_page_size(make_conf, db, sample_catalog,
                                                 admin_headers):
    from fleetflow.api.app import create_app

    client = create_app(make_conf(api={"page_size": 2}), database=db).test_client()
    body = client.get("/v2/admin/hosts", headers=admin_headers).get_json()
    assert len(body["hosts"]) == 2 and body["links"][0]["rel"] == "next"


def test_host_show(client, admin_headers, sample_catalog):
    response = client.get("/v2/admin/hosts/host-003", headers=admin_headers)
    assert response.status_code == 200
    host = response.get_json()["host"]
    assert host["name"] == "host-003" and host["topology"]["region"] == "europe"


def test_unknown_host_is_404(client, admin_headers, sample_catalog):
    response = client.get("/v2/admin/hosts/host-999", headers=admin_headers)
    assert response.status_code == 404
    assert "host-999" in response.get_json()["errors"][0]["detail"]


@pytest.mark.parametrize("state", ["maintenance", "down", "disabled", "up"])
def test_host_state_change_is_persisted(client, admin_headers, sample_catalog, state):
    response = client.put("/v2/admin/hosts/host-002", headers=admin_headers,
                          json={"host": {"state": state, "reason": f"to {state}"}})
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["host"]["state"] == state
    row = host_row(sample_catalog, "host-002")
    assert (row.state, row.state_reason) == (state, f"to {state}")
    shown = client.get("/v2/admin/hosts/host-002", headers=admin_headers).get_json()["host"]
    assert shown["state"] == state and shown["reason"] == f"to {state}"
    assert host_row(sample_catalog, "host-001").state == "up"


def test_host_state_change_without_reason_clears_it(client, admin_headers, sample_catalog):
    client.put("/v2/admin/hosts/host-001", headers=admin_headers,
               json={"host": {"state": "maintenance", "reason": "disk swap"}})
    response = client.put("/v2/admin/hosts/host-001", headers=admin_headers,
                          json={"host": {"state": "up"}})
    assert response.get_json()["host"]["reason"] is None
    assert host_row(sample_catalog, "host-001").state_reason is None


def test_refused_host_updates_change_nothing(client, admin_headers, member_headers,
                                             sample_catalog):
    bad = client.put("/v2/admin/hosts/host-001", headers=admin_headers,
                     json={"host": {"state": "on-fire"}})
    forbidden = client.put("/v2/admin/hosts/host-001", headers=member_headers,
                           json={"host": {"state": "down"}})
    missing = client.put("/v2/admin/hosts/host-404", headers=admin_headers,
                         json={"host": {"state": "down"}})
    assert (bad.status_code, forbidden.status_code, missing.status_code) == (400, 403, 404)
    assert host_row(sample_catalog, "host-001").state == "up"


# -- flavors and images ----------------------------------------------------------------

def test_flavor_list(client, reader_headers, tenant, sample_catalog):
    response = client.get(f"/v2/{tenant}/flavors", headers=reader_headers)
    assert response.status_code == 200
    flavors = response.get_json()["flavors"]
    assert [f["name"] for f in flavors] == ["g1.large", "m1.small"]
    gpu = flavors[0]
    assert gpu["extra_specs"]["gpu"] == "true"
    assert gpu["resources"] == {"VCPU": 8, "MEMORY_MB": 16384, "DISK_GB": 80, "GPU": 1}


@pytest.mark.parametrize("ref", ["m1.small", "11111111-1111-1111-1111-111111111111"])
def test_flavor_by_name_or_id(client, member_headers, tenant, sample_catalog, ref):
    response = client.get(f"/v2/{tenant}/flavors/{ref}", headers=member_headers)
    assert response.status_code == 200
    flavor = response.get_json()["flavor"]
    assert flavor["id"] == "11111111-1111-1111-1111-111111111111"
    assert (flavor["name"], flavor["vcpus"], flavor["ram_mb"]) == ("m1.small", 1, 2048)


def test_unknown_flavor_is_404(client, member_headers, tenant, sample_catalog):
    response = client.get(f"/v2/{tenant}/flavors/m9.huge", headers=member_headers)
    assert response.status_code == 404 and response.get_json()["errors"][0]["code"] == \
        "fleetflow.not_found"


def test_image_list_and_show(client, reader_headers, tenant, sample_catalog):
    listed = client.get(f"/v2/{tenant}/images", headers=reader_headers).get_json()
    assert [i["name"] for i in listed["images"]] == ["cirros", "ubuntu-24.04"]
    for ref in ("cirros", "33333333-3333-3333-3333-333333333333"):
        image = client.get(f"/v2/{tenant}/images/{ref}", headers=reader_headers).get_json()
        assert image["image"] == {"id": "33333333-3333-3333-3333-333333333333",
                                  "name": "cirros", "min_disk_gb": 1, "min_ram_mb": 64}
    missing = client.get(f"/v2/{tenant}/images/windows", headers=reader_headers)
    assert missing.status_code == 404


def test_catalog_pages_like_hosts(client, reader_headers, tenant, sample_catalog):
    images, pages = follow(client, reader_headers, f"/v2/{tenant}/images?limit=1", "images")
    assert [i["name"] for i in images] == ["cirros", "ubuntu-24.04"] and pages == 2
    flavors, _ = follow(client, reader_headers, f"/v2/{tenant}/flavors?limit=1", "flavors")
    assert [f["name"] for f in flavors] == ["g1.large", "m1.small"]


def test_catalog_of_another_tenant_is_403(client, reader_headers, sample_catalog):
    for path in ("/v2/tenant-z/flavors", "/v2/tenant-z/images/cirros"):
        assert client.get(path, headers=reader_headers).status_code == 403
