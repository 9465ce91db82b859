"""GET /v2/{tenant_id}/reservations/{id}: the body is built without marshmallow.

The route writes its JSON by hand (it is polled while large reservations
build); these tests pin that body to what ``ReservationResponseSchema`` dumps
from the ORM rows, the way the route answered before.
"""

from __future__ import annotations

import pytest

from fleetflow.api.hosts_view import opaque_id
from fleetflow.api.reservations import schemas
from fleetflow.common import states
from fleetflow.persistence import reservations as rows
from tests.functional.host_names import names_in, restrict_show_host

URL = "/v2/tenant-a/reservations"
SHOWN = ("id", "name", "status", "policy", "flow_id", "created_at", "updated_at", "fault")


def schema_dump(db, rid: str, tenant: str, href: str, app, headers: dict) -> dict:
    """The body as the schema dumps it from ORM objects, for the caller of ``headers``."""
    # What the caller may see of hosts comes from the request's policy check.
    with app.test_request_context(f"{URL}/{rid}", headers=headers), db.session() as session:
        app.preprocess_request()
        reservation = rows.get(session, rid, tenant)
        data = {name: getattr(reservation, name) for name in SHOWN}
        data.update(progress=rows.progress(session, rid), queue=None,
                    links=[{"rel": "self", "href": href}],
                    instances=rows.instances(session, rid))
        return schemas.ReservationResponseSchema().dump({"reservation": data})


@pytest.fixture
def mixed(db, tenant):
    """A PARTIAL reservation of five instances in different states; returns its id."""
    with db.session() as session:
        rid = rows.create(session, tenant_id=tenant, user_id="u", name="mixed",
                          policy=states.BEST_EFFORT, request={}, count=5,
                          flavor_id="f-1", image_id="i-1", group_id=None).id
        rows.get(session, rid).flow_id = "flow-1"
    with db.session() as session:
        ids = rows.instance_ids(session, rid)
        # Retried once: two hosts tried, ACTIVE on the second.
        rows.record_attempt(session, ids[0], "host-002", status=states.BUILDING,
                            task_state=states.TASK_SPAWNING)
        rows.record_attempt(session, ids[0], "host-001")
        rows.update_instance(session, ids[0], status=states.ACTIVE, task_state=None)
        # Failed with a fault made by rows.fault: it also holds "time".
        rows.update_instance(session, ids[1], status=states.ERROR, host="host-003",
                             attempts=1, hosts_tried=["host-003"],
                             fault=rows.fault("BUILD_FAILED", "disk full", "boot",
                                              "host-003"))
        # ids[2] stays PENDING: no host, nothing tried.
        rows.update_instance(session, ids[3], status=states.BUILDING,
                             task_state=states.TASK_SPAWNING, host="host-001", attempts=1,
                             hosts_tried=["host-001"])
        # A fault with keys the schema does not know and without step/host.
        rows.update_instance(session, ids[4], status=states.ERROR,
                             fault={"code": "NO_VALID_HOST", "message": "did not fit",
                                    "time": "2024-01-01T00:00:00Z", "detail": {"n": 1}})
        rows.set_status(session, rid, states.PARTIAL,
                        fault=rows.fault("PARTIAL", "2 of 5 failed"))
    return rid


def test_show_body_equals_the_schema_dump(mixed, db, app, client, member_headers, tenant):
    response = client.get(f"{URL}/{mixed}", headers=member_headers)

    assert response.status_code == 200
    assert response.mimetype == "application/json"
    href = f"http://localhost{URL}/{mixed}"
    assert response.json == schema_dump(db, mixed, tenant, href, app, member_headers)


def test_show_body_equals_the_schema_dump_with_hosts_hidden(mixed, db, app, client, conf,
                                                             member_headers, tenant):
    restrict_show_host(conf)

    response = client.get(f"{URL}/{mixed}", headers=member_headers)

    href = f"http://localhost{URL}/{mixed}"
    assert response.json == schema_dump(db, mixed, tenant, href, app, member_headers)
    body = response.json["reservation"]
    assert names_in(body, {"host-001", "host-002", "host-003"}) == set()
    first, failed = body["instances"][:2]
    assert first["host"] is None and first["host_id"] == opaque_id(tenant, "host-001")
    assert first["hosts_tried"] == [opaque_id(tenant, "host-002"), first["host_id"]]
    assert failed["fault"] == {"code": "BUILD_FAILED", "message": "disk full", "step": "boot",
                               "host": None}


def test_fault_messages_name_no_place_of_the_fleet_when_hosts_are_hidden(
        mixed, sample_catalog, db, app, client, conf, member_headers, tenant):
    with db.session() as session:
        last = rows.instance_ids(session, mixed)[4]
        rows.update_instance(session, last, fault={
            "code": "NO_ROUTE", "message": "host-002 in rack r2 of na-1: no route."})
    restrict_show_host(conf)

    response = client.get(f"{URL}/{mixed}", headers=member_headers)

    href = f"http://localhost{URL}/{mixed}"
    assert response.json == schema_dump(db, mixed, tenant, href, app, member_headers)
    fault = response.json["reservation"]["instances"][4]["fault"]
    assert fault["message"] == (f"{opaque_id(tenant, 'host-002')} in rack "
                                f"{opaque_id(tenant, 'r2')} of {opaque_id(tenant, 'na-1')}: "
                                "no route.")


def test_show_body_drops_unknown_fault_keys(mixed, db, client, member_headers):
    with db.session() as session:
        stored = {i.name: i.fault for i in rows.instances(session, mixed)}
    assert "time" in stored["mixed-0001"] and "detail" in stored["mixed-0004"]

    body = client.get(f"{URL}/{mixed}", headers=member_headers).json["reservation"]

    assert set(body["fault"]) == {"code", "message", "step", "host"}
    faults = [i["fault"] for i in body["instances"]]
    assert faults[0] is None and faults[2] is None and faults[3] is None
    assert faults[1] == {"code": "BUILD_FAILED", "message": "disk full", "step": "boot",
                         "host": "host-003"}
    assert faults[4] == {"code": "NO_VALID_HOST", "message": "did not fit"}
    first = body["instances"][0]
    assert (first["host"], first["attempts"], first["hosts_tried"]) == (
        "host-001", 2, ["host-002", "host-001"])
    assert body["instances"][2]["host"] is None


def test_show_of_a_fresh_reservation_equals_the_schema_dump(db, app, client, member_headers,
                                                             tenant):
    with db.session() as session:
        rid = rows.create(session, tenant_id=tenant, user_id=None, name=None,
                          policy=states.ALL_OR_NOTHING, request={}, count=2,
                          flavor_id="f-1", image_id="i-1", group_id=None).id

    response = client.get(f"{URL}/{rid}", headers=member_headers)

    assert response.status_code == 200
    assert response.json == schema_dump(db, rid, tenant, f"http://localhost{URL}/{rid}", app,
                                          member_headers)
    assert response.json["reservation"]["fault"] is None


def test_show_answers_404_for_another_tenants_reservation(mixed, client, make_headers):
    headers = make_headers("tenant-b", "member", "reader")

    response = client.get(f"/v2/tenant-b/reservations/{mixed}", headers=headers)

    assert response.status_code == 404
