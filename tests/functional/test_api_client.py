"""The Python client and the body limit over real HTTP (werkzeug's threaded server)."""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest

from fleetflow.api.client import Client, FleetflowApiError, where


@pytest.fixture
def admin_client(live_server, sample_catalog):
    return Client(live_server, project_id="admin", user_id="ops", roles=["admin"])


def test_client_lists_hosts_across_pages(admin_client):
    hosts = admin_client.list_hosts(limit=1)
    assert [h["name"] for h in hosts] == ["host-001", "host-002", "host-003"]
    assert [h["name"] for h in admin_client.list_hosts(region="europe")] == ["host-003"]


def test_client_updates_and_reads_a_host(admin_client, sample_catalog):
    host = admin_client.update_host("host-002", "maintenance", reason="firmware")
    assert (host["state"], host["reason"]) == ("maintenance", "firmware")
    assert admin_client.get_host("host-002")["state"] == "maintenance"
    assert [h["name"] for h in admin_client.list_hosts(state="maintenance")] == ["host-002"]


def test_client_reads_the_catalog_as_a_tenant(live_server, sample_catalog):
    client = Client(live_server, project_id="tenant-a", roles=["reader"])
    assert [f["name"] for f in client.list_flavors()] == ["g1.large", "m1.small"]
    assert client.get_flavor("g1.large")["vcpus"] == 8
    assert client.get_image("cirros")["min_ram_mb"] == 64
    assert [i["name"] for i in client.list_images()] == ["cirros", "ubuntu-24.04"]


def test_client_raises_the_api_error(live_server, sample_catalog):
    member = Client(live_server, project_id="tenant-a", roles=["member"])
    with pytest.raises(FleetflowApiError) as forbidden:
        member.list_hosts()
    assert forbidden.value.status == 403 and forbidden.value.code == "fleetflow.forbidden"
    assert forbidden.value.request_id.startswith("req-")
    assert forbidden.value.errors[0]["request_id"] == forbidden.value.request_id

    admin = Client(live_server, project_id="admin", roles=["admin"])
    with pytest.raises(FleetflowApiError) as invalid:
        admin.update_host("host-001", "exploded")
    assert invalid.value.status == 400 and "'host.state'" in str(invalid.value)

    anonymous = Client(live_server)
    with pytest.raises(FleetflowApiError) as unauthorized:
        anonymous.get_host("host-001")
    assert unauthorized.value.status == 401


def test_client_quotes_names_in_paths(admin_client):
    with pytest.raises(FleetflowApiError) as missing:
        admin_client.get_host("odd host?#1")
    # Unquoted, '?' and '#' would cut the name short; quoted, it arrives whole.
    assert missing.value.status == 404 and "odd host?#1" in str(missing.value)


def _send(base_url, body_chunks, headers, chunked):
    """PUT a host over a raw connection; (status, decoded body)."""
    url = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        all_headers = {"X-Project-Id": "admin", "X-Roles": "admin",
                       "Content-Type": "application/json", **headers}
        if chunked:
            conn.request("PUT", "/v2/admin/hosts/host-001", body=iter(body_chunks),
                         headers=all_headers, encode_chunked=True)
        else:
            conn.request("PUT", "/v2/admin/hosts/host-001", body=b"".join(body_chunks),
                         headers=all_headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read()), response.headers
    finally:
        conn.close()


def _payload(reason_bytes: int) -> list[bytes]:
    data = json.dumps({"host": {"state": "down", "reason": "r" * reason_bytes}}).encode()
    return [data[i:i + 8192] for i in range(0, len(data), 8192)]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_large_body_over_http_is_413(live_server, sample_catalog, chunked):
    status, body, headers = _send(live_server, _payload(150 * 1024), {}, chunked)
    assert status == 413
    (error,) = body["errors"]
    assert error["code"] == "fleetflow.request_too_large"
    assert error["request_id"] == headers["X-OpenStack-Request-Id"]


def test_chunked_body_under_limit_over_http_is_served(live_server, sample_catalog):
    status, body, _ = _send(live_server, _payload(200), {}, chunked=True)
    assert status == 200 and body["host"]["state"] == "down"


@pytest.mark.parametrize("item, shown", [
    ({"type": "server", "host": "h-1", "host_id": "ab12"}, "h-1"),
    ({"type": "server", "host": None, "host_id": "ab12"}, "ab12"),
    ({"host": None, "host_id": "ab12"}, "ab12"),
    ({"type": "volume", "backend": "z1-r1-shared", "host_id": "cd34"}, "z1-r1-shared"),
    ({"type": "volume", "backend": None, "host_id": "cd34"}, "cd34"),
    ({"type": "server", "host": None, "host_id": None}, None),
])
def test_where_shows_the_host_id_where_the_name_is_hidden(item, shown):
    assert where(item) == shown
