"""GET /v2/{tenant_id}/volumes: a project's volumes, its vclusters' and the others.

Most tests write volume rows directly; one builds a cluster on the small cloud
(its ``vclusters`` service posts to ``small_cloud.posted``, run here on
TaskFlow's serial engine) and follows its volumes to DELETED.
"""

from __future__ import annotations

import datetime

import pytest
import taskflow.engines
from defusedxml import ElementTree as SafeET

from fleetflow.common import states
from fleetflow.flows import registry
from fleetflow.persistence.models import Volume

URL = "/v2/tenant-a/volumes"
FIELDS = {"id", "name", "size", "volume_type", "status", "attached_to", "vcluster_id",
          "backend", "created_at", "updated_at"}


def add_volume(db, volume_id: str, tenant: str = "tenant-a", **fields) -> str:
    now = datetime.datetime(2025, 1, 1, 12, 0, 0)
    values = {"name": f"vol-{volume_id[-2:]}", "size_gb": 10, "volume_type": "ssd",
              "backend": "z1-r1-shared", "status": states.VOLUME_AVAILABLE,
              "created_at": now, "updated_at": now, **fields}
    with db.session() as session:
        session.add(Volume(id=volume_id, tenant_id=tenant, **values))
    return volume_id


def uuid(n: int) -> str:
    return f"00000000-0000-0000-0000-{n:012d}"


@pytest.fixture
def volumes(db):
    """Tenant-a: two of a vcluster (one in use), one of no cluster, one deleted;
    tenant-b: one."""
    add_volume(db, uuid(1), vcluster_id="vc-1", status=states.VOLUME_IN_USE,
               instance_id=uuid(99))
    add_volume(db, uuid(2), vcluster_id="vc-1", backend="z1-r2-shared")
    add_volume(db, uuid(3), name=None, volume_type=None, size_gb=1, backend=None,
               status=states.VOLUME_CREATING)
    add_volume(db, uuid(4), status=states.VOLUME_DELETED)
    add_volume(db, uuid(5), tenant="tenant-b")
    return db


def ids(response) -> list[str]:
    assert response.status_code == 200, response.json
    return [v["id"] for v in response.json["volumes"]]


def test_list_shows_the_projects_live_volumes_without_backend(volumes, client,
                                                              member_headers):
    response = client.get(URL, headers=member_headers)

    # Made in the same instant: newest first is then the id, descending.
    assert ids(response) == [uuid(3), uuid(2), uuid(1)]
    oldest = response.json["volumes"][-1]
    assert set(oldest) == FIELDS
    assert oldest == {"id": uuid(1), "name": "vol-01", "size": 10, "volume_type": "ssd",
                     "status": "IN-USE", "attached_to": uuid(99), "vcluster_id": "vc-1",
                     "backend": None, "created_at": "2025-01-01T12:00:00+00:00",
                     "updated_at": "2025-01-01T12:00:00+00:00"}
    assert response.json["links"] == []


def test_an_administrator_sees_the_backend(volumes, client, admin_headers):
    listed = client.get(URL, headers=admin_headers).json["volumes"]
    shown = client.get(f"{URL}/{uuid(2)}", headers=admin_headers).json["volume"]

    assert [v["backend"] for v in listed] == [None, "z1-r2-shared", "z1-r1-shared"]
    assert shown["backend"] == "z1-r2-shared"


@pytest.mark.parametrize("query, expected", [
    ("vcluster_id=vc-1", [2, 1]),
    ("vcluster_id=vc-2", []),
    ("status=DELETED", [4]),
    ("status=CREATING", [3]),
    ("vcluster_id=vc-1&status=AVAILABLE", [2]),
])
def test_list_filters(volumes, client, reader_headers, query, expected):
    assert ids(client.get(f"{URL}?{query}", headers=reader_headers)) == [
        uuid(n) for n in expected]


def test_list_pages_with_limit_and_marker(volumes, client, member_headers):
    page = client.get(f"{URL}?limit=2", headers=member_headers)

    assert ids(page) == [uuid(3), uuid(2)]
    (link,) = page.json["links"]
    assert link["rel"] == "next"
    assert ids(client.get(link["href"], headers=member_headers)) == [uuid(1)]


@pytest.mark.parametrize("query, field", [("status=GONE", "status"), ("limit=0", "limit")])
def test_bad_queries_are_400(volumes, client, member_headers, query, field):
    response = client.get(f"{URL}?{query}", headers=member_headers)

    assert response.status_code == 400
    assert f"'{field}'" in response.json["errors"][0]["detail"]


def test_show_any_status_of_ones_own(volumes, client, reader_headers):
    shown = client.get(f"{URL}/{uuid(4)}", headers=reader_headers)

    assert shown.status_code == 200
    assert set(shown.json["volume"]) == FIELDS
    assert shown.json["volume"]["status"] == "DELETED"
    assert shown.json["volume"]["backend"] is None


def test_another_tenants_volume_is_404(volumes, client, member_headers, make_headers):
    foreign = client.get(f"{URL}/{uuid(5)}", headers=member_headers)
    unknown = client.get(f"{URL}/nope", headers=member_headers)

    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json["errors"][0]["code"] == "fleetflow.not_found"
    other = make_headers("tenant-b", "reader")
    assert ids(client.get("/v2/tenant-b/volumes", headers=other)) == [uuid(5)]
    assert client.get(f"/v2/tenant-b/volumes/{uuid(1)}", headers=other).status_code == 404
    assert client.get(URL, headers=other).status_code == 403


def test_list_in_xml(volumes, client, member_headers):
    response = client.get(f"{URL}?limit=1", headers={**member_headers, "Accept":
                                                     "application/xml"})

    assert response.status_code == 200 and response.mimetype == "application/xml"
    root = SafeET.fromstring(response.data)
    assert root.tag == "volumes"
    (item,) = root.findall("volume")
    assert item.get("id") == uuid(3) and item.get("size") == "1"
    assert item.get("backend") is None
    assert root.find("links/link").get("rel") == "next"


def _settle(cloud) -> None:
    while cloud.posted:
        flow_name, kwargs, store = cloud.posted.pop(0)
        engine = taskflow.engines.load(registry.build(flow_name, **kwargs),
                                       store=dict(store or {}), engine="serial")
        try:
            engine.run()
        except Exception:  # noqa: BLE001 - a reverted flow raises; its state says so
            pass


def test_a_vclusters_volumes_from_creation_to_deletion(small_cloud, client, member_headers,
                                                       admin_headers):
    body = {"vcluster": {"name": "db", "instances": [
        {"name": "srv", "type": "server", "spec": {"imageRef": "cirros", "flavorRef": "1"}},
        {"name": "data", "type": "volume", "spec": {"size": 20, "attachTo": "srv"}},
        {"name": "scratch", "type": "volume", "spec": {"size": 5, "volume_type": ""}}]}}
    vcluster_url = client.post("/v2/tenant-a/vclusters", json=body,
                               headers=member_headers).headers["Location"]
    vcluster_id = vcluster_url.rsplit("/", 1)[-1]
    creating = client.get(f"{URL}?vcluster_id={vcluster_id}", headers=member_headers)
    assert [v["status"] for v in creating.json["volumes"]] == ["CREATING", "CREATING"]

    _settle(small_cloud)
    view = client.get(vcluster_url, headers=member_headers).json["vcluster"]
    server_id = next(m["id"] for m in view["instances"] if m["name"] == "srv")
    listed = {v["name"]: v for v in client.get(
        f"{URL}?vcluster_id={vcluster_id}", headers=admin_headers).json["volumes"]}
    assert listed["data"]["status"] == "IN-USE" and listed["data"]["attached_to"] == server_id
    assert listed["data"]["size"] == 20 and listed["data"]["backend"].endswith("-shared")
    assert listed["scratch"]["status"] == "AVAILABLE" and listed["scratch"]["volume_type"] is None
    mine = client.get(f"{URL}/{listed['data']['id']}", headers=member_headers).json["volume"]
    assert mine["backend"] is None and mine["vcluster_id"] == vcluster_id

    assert client.delete(vcluster_url, headers=member_headers).status_code == 202
    _settle(small_cloud)
    assert ids(client.get(f"{URL}?vcluster_id={vcluster_id}", headers=member_headers)) == []
    deleted = client.get(f"{URL}?vcluster_id={vcluster_id}&status=DELETED",
                         headers=member_headers)
    assert sorted(ids(deleted)) == sorted(v["id"] for v in listed.values())
