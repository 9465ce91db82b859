"""GET/DELETE /v2/{tenant_id}/servers: instances one by one, with a real ReservationOps service.

Its ``submit`` only records the posted jobs (see test_api_reservations.py).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Instance
from fleetflow.services.reservations import ReservationOps, ReservationRequest

URL = "/v2/tenant-a/servers"


@pytest.fixture
def jobs():
    return []


@pytest.fixture
def operations(conf, db, jobs):
    def submit(flow_name, flow_kwargs, **options):
        jobs.append((flow_name, flow_kwargs, options))
        return "flow"

    return ReservationOps(conf, db, submit=submit)


@pytest.fixture
def api_services(operations):
    return {"reservations": operations}


@pytest.fixture
def make_reservation(operations, sample_catalog, jobs):
    """Reserve ``count`` instances for ``tenant``; returns (reservation id, instance ids)."""
    def _make(count=2, tenant="tenant-a"):
        req = ReservationRequest(tenant_id=tenant, user_id=None, flavor_ref="m1.small",
                                 image_ref="cirros", min_count=count, max_count=count)
        reservation, _ = operations.reserve(req)
        jobs.clear()
        with sample_catalog.session() as session:
            return reservation.id, rows.instance_ids(session, reservation.id)

    return _make


def set_instance(db, instance_id, **values):
    with db.session() as session:
        rows.update_instance(session, instance_id, **values)


def listed(client, headers, query="") -> list[str]:
    response = client.get(URL + query, headers=headers)
    assert response.status_code == 200, response.json
    return [s["id"] for s in response.json["servers"]]


def test_list_filters_by_reservation_and_status(client, member_headers, make_reservation,
                                                db):
    first, first_ids = make_reservation(2)
    _second, second_ids = make_reservation(1)
    set_instance(db, first_ids[0], status=states.ACTIVE, host="host-001")

    assert sorted(listed(client, member_headers)) == sorted(first_ids + second_ids)
    assert sorted(listed(client, member_headers, f"?reservation_id={first}")) == sorted(
        first_ids)
    assert listed(client, member_headers, f"?reservation_id={first}&status=ACTIVE") == [
        first_ids[0]]
    assert listed(client, member_headers, "?reservation_id=r-000000000000") == []
    assert client.get(URL + "?status=SLEEPY", headers=member_headers).status_code == 400


def test_deleted_servers_are_listed_only_when_asked(client, member_headers, make_reservation,
                                                     db):
    _rid, (gone, kept) = make_reservation(2)
    set_instance(db, gone, status=states.DELETED)

    assert listed(client, member_headers) == [kept]
    assert listed(client, member_headers, "?status=DELETED") == [gone]


def test_list_is_paginated_newest_first(client, member_headers, make_reservation, db):
    _rid, older = make_reservation(2)
    _rid, newer = make_reservation(2)
    with db.session() as session:
        made = dict(session.execute(sa.select(Instance.id, Instance.created_at)
                                    .where(Instance.id.in_(older + newer))).all())
    # Servers made in the same instant (one reservation's may be) go by id.
    ids = sorted(made, key=lambda i: (made[i], i), reverse=True)
    assert set(ids[:2]) == set(newer)

    page = client.get(URL + "?limit=3", headers=member_headers).json
    assert [s["id"] for s in page["servers"]] == ids[:3]
    rest = client.get(page["links"][0]["href"], headers=member_headers).json
    assert [s["id"] for s in rest["servers"]] == ids[3:]


def test_host_filter_is_for_administrators(client, member_headers, admin_headers,
                                           make_reservation, db):
    _rid, (on_one, on_two) = make_reservation(2)
    set_instance(db, on_one, status=states.ACTIVE, host="host-001")
    set_instance(db, on_two, status=states.ACTIVE, host="host-002")

    refused = client.get(URL + "?host=host-001", headers=member_headers)
    assert refused.status_code == 403
    assert listed(client, admin_headers, "?host=host-001") == [on_one]


def test_a_marker_must_be_a_server_of_the_list_but_may_have_changed(
        client, member_headers, make_reservation, db):
    _rid, ids = make_reservation(3)
    _theirs, (foreign, *_) = make_reservation(1, tenant="tenant-b")
    first, *rest = listed(client, member_headers)  # newest first
    assert sorted([first, *rest]) == sorted(ids)
    for instance_id in ids:
        set_instance(db, instance_id, status=states.BUILDING)
    set_instance(db, first, status=states.ACTIVE)

    # It left the BUILDING list between two pages: the next page still starts after it.
    assert listed(client, member_headers, f"?status=BUILDING&marker={first}") == rest
    for marker in (foreign, "0f0c8a34-5d1e-4c59-9a53-0d2f3e7d6a01"):
        response = client.get(f"{URL}?marker={marker}", headers=member_headers)
        assert response.status_code == 400
        assert "'marker'" in response.json["errors"][0]["detail"]


ADMIN_URL = "/v2/admin/servers"


def admin_listed(client, headers, query="") -> list[str]:
    response = client.get(ADMIN_URL + query, headers=headers)
    assert response.status_code == 200, response.json
    return [s["id"] for s in response.json["servers"]]


def test_operators_list_every_projects_servers(client, admin_headers, member_headers,
                                               make_reservation, db):
    _a, mine = make_reservation(2)
    _b, theirs = make_reservation(1, tenant="tenant-b")
    set_instance(db, mine[0], status=states.ACTIVE, host="host-001")
    set_instance(db, theirs[0], status=states.DELETED)

    assert sorted(admin_listed(client, admin_headers)) == sorted(mine)
    assert admin_listed(client, admin_headers, "?status=DELETED") == theirs
    assert admin_listed(client, admin_headers, "?project_id=tenant-a&host=host-001") == [
        mine[0]]
    assert admin_listed(client, admin_headers, "?tenant_id=tenant-b&status=DELETED") == theirs
    assert admin_listed(client, admin_headers, "?project_id=tenant-c") == []
    shown = client.get(ADMIN_URL, headers=admin_headers).json["servers"]
    assert {(s["tenant_id"], s["host"]) for s in shown} == {("tenant-a", "host-001"),
                                                            ("tenant-a", None)}
    both = client.get(f"{ADMIN_URL}?project_id=tenant-a&tenant_id=tenant-b",
                      headers=admin_headers)
    assert both.status_code == 400 and "'tenant_id'" in both.json["errors"][0]["detail"]
    assert client.get(ADMIN_URL, headers=member_headers).status_code == 403


def test_the_operators_list_pages_across_projects(client, admin_headers, make_reservation):
    _a, mine = make_reservation(2)
    _b, theirs = make_reservation(2, tenant="tenant-b")

    seen, url = [], f"{ADMIN_URL}?limit=1"
    while url:
        page = client.get(url, headers=admin_headers).json
        seen += [s["id"] for s in page["servers"]]
        url = page["links"][0]["href"] if page["links"] else None
    # Newest first across projects: the pages give the one-page list, once each.
    assert seen == admin_listed(client, admin_headers)
    assert sorted(seen) == sorted(mine + theirs)


def test_all_tenants_lists_every_project_for_admins_and_is_ignored_for_others(
        client, admin_headers, member_headers, make_reservation):
    _a, mine = make_reservation(1)
    _b, theirs = make_reservation(1, tenant="tenant-b")

    assert sorted(listed(client, admin_headers, "?all_tenants=1")) == sorted(mine + theirs)
    assert listed(client, admin_headers, "?all_tenants=0") == mine
    assert listed(client, admin_headers) == mine
    # As Nova: a member asking for every project gets the own project's servers.
    assert listed(client, member_headers, "?all_tenants=1") == mine
    assert client.get(URL + "?all_tenants=maybe", headers=admin_headers).status_code == 400


def test_show_a_server(client, member_headers, make_reservation, db):
    rid, (server_id, _other) = make_reservation(2)
    fault = rows.fault("BUILD_FAILED", "no disk", "boot", "host-002")
    set_instance(db, server_id, status=states.ERROR, host="host-002", attempts=2,
                 hosts_tried=["host-001", "host-002"], fault=fault)

    response = client.get(f"{URL}/{server_id}", headers=member_headers)

    assert response.status_code == 200
    server = response.json["server"]
    assert server["id"] == server_id and server["reservation_id"] == rid
    assert server["tenant_id"] == "tenant-a" and server["status"] == "ERROR"
    assert server["hosts_tried"] == ["host-001", "host-002"] and server["attempts"] == 2
    assert server["fault"] == {"code": "BUILD_FAILED", "message": "no disk", "step": "boot",
                               "host": "host-002"}
    assert server["flavor_id"] == "11111111-1111-1111-1111-111111111111"
    assert server["links"][0]["href"].endswith(f"{URL}/{server_id}")


def test_another_tenants_server_is_404(client, make_headers, make_reservation, jobs):
    _rid, (server_id,) = make_reservation(1)
    other = make_headers("tenant-b", "member", "reader")

    assert client.get(f"/v2/tenant-b/servers/{server_id}", headers=other).status_code == 404
    assert client.delete(f"/v2/tenant-b/servers/{server_id}",
                         headers=other).status_code == 404
    assert client.get("/v2/tenant-b/servers", headers=other).json["servers"] == []
    assert jobs == []


def test_unknown_server_is_404(client, member_headers):
    assert client.get(f"{URL}/nope", headers=member_headers).status_code == 404
    missing = client.get(f"{URL}/0f0c8a34-5d1e-4c59-9a53-0d2f3e7d6a01",
                         headers=member_headers)
    assert missing.status_code == 404
    assert missing.json["errors"][0]["code"] == "fleetflow.not_found"


def test_delete_posts_a_teardown_of_that_server(client, member_headers, make_reservation,
                                                db, jobs):
    rid, (server_id, other) = make_reservation(2)
    set_instance(db, server_id, status=states.ACTIVE, host="host-001")

    response = client.delete(f"{URL}/{server_id}", headers=member_headers)

    assert response.status_code == 202
    assert response.json["server"]["status"] == "DELETING"
    assert response.json["server"]["task_state"] == "deleting"
    ((name, kwargs, _options),) = jobs
    assert name == "reservation-teardown"
    assert kwargs == {"instance_ids": [server_id], "reservation_id": rid}
    shown = client.get(f"{URL}/{other}", headers=member_headers).json["server"]
    assert shown["status"] == "PENDING"


def test_delete_while_building_is_409(client, member_headers, make_reservation, jobs):
    _rid, (server_id,) = make_reservation(1)

    assert client.delete(f"{URL}/{server_id}", headers=member_headers).status_code == 409
    assert jobs == []


def test_reader_may_read_but_not_delete(client, reader_headers, make_reservation, db, jobs):
    _rid, (server_id,) = make_reservation(1)
    set_instance(db, server_id, status=states.ACTIVE)

    assert client.get(f"{URL}/{server_id}", headers=reader_headers).status_code == 200
    assert client.delete(f"{URL}/{server_id}", headers=reader_headers).status_code == 403
    assert jobs == []


def test_the_operators_list_is_in_the_openapi_document(client):
    paths = client.get("/openapi.json").json["paths"]
    admin = {p["name"] for p in paths["/v2/admin/servers"]["get"]["parameters"]}
    tenant = {p["name"] for p in paths["/v2/{tenant_id}/servers"]["get"]["parameters"]}
    assert {"project_id", "tenant_id", "host", "status", "limit", "marker"} <= admin
    assert "all_tenants" in tenant
