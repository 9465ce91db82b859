"""POST/GET/DELETE /v2/{tenant_id}/reservations against a real ReservationOps service.

The ReservationOps service is the real one; only its ``submit`` (the engine's job
poster) records the jobs in a list, so each test can say exactly which flow
the API posted, with which arguments, and that a refused request posted none.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetflow.api.hosts_view import opaque_id
from fleetflow.common import states
from fleetflow.persistence import groups as group_rows
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Instance, Reservation

URL = "/v2/tenant-a/reservations"


@pytest.fixture
def api_services(recording_services):
    return recording_services


def counts(db) -> tuple[int, int]:
    """(reservation rows, instance rows)."""
    with db.session() as session:
        return (session.scalar(sa.select(sa.func.count()).select_from(Reservation)),
                session.scalar(sa.select(sa.func.count()).select_from(Instance)))


def details(response) -> str:
    return " ".join(e["detail"] for e in response.json["errors"])


@pytest.fixture
def reserve(client, member_headers, sample_catalog):
    """POST a reservation of m1.small/cirros with ``fields``; returns the response."""
    def _reserve(headers=None, url=URL, query="", **fields):
        fields.setdefault("flavor_ref", "m1.small")
        fields.setdefault("image_ref", "cirros")
        return client.post(url + query, json={"reservation": fields},
                           headers=headers or member_headers)

    return _reserve


def set_status(db, reservation_id, status, instance_status=None):
    with db.session() as session:
        rows.set_status(session, reservation_id, status)
        rows.update_instances(session, rows.instance_ids(session, reservation_id),
                              status=instance_status or status)


# -- POST ---------------------------------------------------------------------------


def test_post_answers_202_with_location_and_posts_one_provision_job(reserve, jobs, db):
    response = reserve(count=3, name="web", capabilities={"gpu": True, "cores": ">= 4"})

    assert response.status_code == 202
    reservation = response.json["reservation"]
    assert reservation["id"].startswith("r-")
    assert reservation["status"] == "PENDING"
    assert reservation["links"] == [{"rel": "self", "href": response.headers["Location"]}]
    assert response.headers["Location"].endswith(f"{URL}/{reservation['id']}")
    assert len(jobs) == 1
    name, kwargs, options = jobs[0]
    assert name == "provision"
    assert kwargs == {"reservation_id": reservation["id"], "count": 3,
                      "policy": "all-or-nothing", "with_volumes": False,
                      "max_reschedules": 3}
    spec = options["store"]["request_spec"]
    assert (spec["min_count"], spec["max_count"]) == (3, 3)
    # JSON true and "true" mean the same requirement; operators pass through.
    assert spec["capabilities"] == {"gpu": "true", "cores": ">= 4"}
    assert options["tenant_id"] == "tenant-a"
    with db.session() as session:
        row = rows.get(session, reservation["id"])
        assert row.flow_id == options["flow_id"]
        assert row.user_id == "tenant-a-user"
        assert [i.name for i in rows.instances(session, row.id)] == [
            "web-0000", "web-0001", "web-0002"]


def test_the_flow_gets_the_configured_reschedule_limit(reserve, jobs, conf):
    conf.set_override("max_reschedules", 1, group="scheduler")

    assert reserve(count=2).status_code == 202
    assert jobs[0][1]["max_reschedules"] == 1


@pytest.mark.parametrize("fields, expected", [
    ({"min_count": 2, "max_count": 5}, (2, 5)),
    ({"max_count": 4}, (1, 4)),
    ({"min_count": 3}, (3, 3)),
])
def test_min_and_max_count_form(reserve, jobs, db, fields, expected):
    response = reserve(**fields)

    assert response.status_code == 202, response.json
    spec = jobs[0][2]["store"]["request_spec"]
    assert (spec["min_count"], spec["max_count"]) == expected
    # One row per instance it may get: max_count of them.
    assert counts(db) == (1, expected[1])


def test_best_effort_with_volume_and_group(reserve, jobs, db, client, member_headers):
    with db.session() as session:
        group_id = group_rows.create(session, "tenant-a", "db", ["anti-affinity"]).id

    response = reserve(count=2, policy="best-effort", volume_gb=10, group_id=group_id)

    assert response.status_code == 202, response.json
    _name, kwargs, options = jobs[0]
    assert kwargs["policy"] == "best-effort" and kwargs["with_volumes"] is True
    assert options["store"]["request_spec"]["group"]["policies"] == ["anti-affinity"]
    with db.session() as session:
        assert {i.group_id for i in rows.instances(
            session, response.json["reservation"]["id"])} == {group_id}


@pytest.mark.parametrize("fields, field", [
    ({"count": 2, "min_count": 1}, "reservation.count"),
    ({}, "reservation.count"),
    ({"min_count": 5, "max_count": 2}, "reservation.min_count"),
    ({"count": 0}, "reservation.count"),
    ({"count": "many"}, "reservation.count"),
    ({"count": 1, "policy": "most"}, "reservation.policy"),
    ({"count": 1, "flavor_ref": None}, "reservation.flavor_ref"),
    ({"count": 1, "capabilities": {"gpu": ["a"]}}, "reservation.capabilities.gpu.value"),
    ({"count": 1, "volume_gb": 0}, "reservation.volume_gb"),
    ({"count": 1, "colour": "blue"}, "reservation.colour"),
])
def test_invalid_bodies_are_400_naming_the_field(reserve, jobs, db, fields, field):
    response = reserve(**fields)

    assert response.status_code == 400
    assert f"'{field}'" in details(response)
    assert response.json["errors"][0]["code"] == "fleetflow.invalid_input"
    assert jobs == [] and counts(db) == (0, 0)


def test_body_without_reservation_key_is_400(client, member_headers, jobs):
    response = client.post(URL, json={"count": 1}, headers=member_headers)

    assert response.status_code == 400
    assert "'reservation'" in details(response)
    assert jobs == []


@pytest.mark.parametrize("fields, field", [
    ({"flavor_ref": "m9.huge"}, "flavor_ref"),
    ({"image_ref": "windows-95"}, "image_ref"),
    ({"group_id": "5b8a7a8e-2f0e-4d3c-9a57-7a1c1f7a2b10"}, "group_id"),
    ({"group_id": "not-a-uuid"}, "group_id"),
])
def test_unknown_references_are_400_naming_the_field(reserve, jobs, db, fields, field):
    response = reserve(count=1, **fields)

    assert response.status_code == 400
    assert field in details(response)
    assert jobs == [] and counts(db) == (0, 0)


def test_flavor_and_image_by_id_work(reserve, jobs):
    response = reserve(count=1, flavor_ref="22222222-2222-2222-2222-222222222222",
                       image_ref="44444444-4444-4444-4444-444444444444")

    assert response.status_code == 202
    spec = jobs[0][2]["store"]["request_spec"]
    assert spec["flavor_id"] == "22222222-2222-2222-2222-222222222222"
    # The flavor's GPU resource is part of what each instance asks for.
    assert spec["resources"]["GPU"] == 1


def test_another_tenants_group_is_unknown(reserve, jobs, db):
    with db.session() as session:
        foreign = group_rows.create(session, "tenant-b", "theirs", []).id

    response = reserve(count=1, group_id=foreign)

    assert response.status_code == 400
    assert "group_id" in details(response)
    assert jobs == []


def test_count_above_the_configured_maximum_is_400(reserve, jobs, db, conf):
    conf.set_override("max_reservation_count", 10, group="api")

    response = reserve(count=11)
    assert response.status_code == 400
    assert "at most 10" in details(response)
    assert reserve(max_count=11).status_code == 400
    assert jobs == [] and counts(db) == (0, 0)
    assert reserve(count=10).status_code == 202


def test_quota_refuses_before_any_row_or_job_exists(reserve, jobs, db, conf):
    conf.set_override("instances", 4, group="quota")
    assert reserve(count=3).status_code == 202

    response = reserve(count=2)

    assert response.status_code == 403
    assert response.json["errors"][0]["code"] == "fleetflow.quota_exceeded"
    assert "instances" in details(response)
    assert len(jobs) == 1 and counts(db) == (1, 3)


def test_quota_counts_vcpus_and_ram_of_the_flavor(reserve, jobs, db):
    with db.session() as session:
        rows.set_quota(session, "tenant-a", {"instances": -1, "vcpus": 16, "ram_mb": -1})

    # g1.large has 8 vcpus: two fit in 16, three do not.
    assert reserve(count=3, flavor_ref="g1.large").status_code == 403
    assert reserve(count=2, flavor_ref="g1.large").status_code == 202
    assert len(jobs) == 1


def test_reader_may_not_reserve(reserve, reader_headers, jobs, db):
    response = reserve(count=1, headers=reader_headers)

    assert response.status_code == 403
    assert jobs == [] and counts(db) == (0, 0)


def test_another_tenants_path_is_refused(reserve, make_headers, jobs, db):
    response = reserve(count=1, headers=make_headers("tenant-b", "member"))

    assert response.status_code == 403
    assert jobs == [] and counts(db) == (0, 0)


def test_admin_may_reserve_for_a_tenant(reserve, admin_headers, jobs, db):
    response = reserve(count=1, headers=admin_headers)

    assert response.status_code == 202
    assert jobs[0][2]["tenant_id"] == "tenant-a"


# -- Idempotency-Key ------------------------------------------------------------------


def test_idempotency_key_returns_the_first_reservation(reserve, member_headers, jobs, db):
    headers = {**member_headers, "Idempotency-Key": "order-42"}
    first = reserve(count=2, headers=headers)
    again = reserve(count=2, headers=headers)

    assert first.status_code == again.status_code == 202
    assert again.json["reservation"]["id"] == first.json["reservation"]["id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert len(jobs) == 1 and counts(db) == (1, 2)


def test_idempotency_key_reused_for_another_request_is_422(reserve, member_headers, jobs,
                                                           db):
    headers = {**member_headers, "Idempotency-Key": '"order-43"'}
    assert reserve(count=2, headers=headers).status_code == 202

    response = reserve(count=3, headers=headers)

    assert response.status_code == 422
    assert response.json["errors"][0]["code"] == "fleetflow.idempotency_key_reused"
    assert "max_count" in details(response)
    assert len(jobs) == 1 and counts(db) == (1, 2)


def test_idempotency_keys_are_per_tenant(reserve, make_headers, jobs):
    a = reserve(count=1, headers={**make_headers("tenant-a", "member"),
                                  "Idempotency-Key": "k"})
    b = reserve(count=1, url="/v2/tenant-b/reservations",
                headers={**make_headers("tenant-b", "member"), "Idempotency-Key": "k"})

    assert a.status_code == b.status_code == 202
    assert a.json["reservation"]["id"] != b.json["reservation"]["id"]
    assert len(jobs) == 2


def test_too_long_idempotency_key_is_400(reserve, member_headers, jobs, db):
    response = reserve(count=1, headers={**member_headers, "Idempotency-Key": "k" * 256})

    assert response.status_code == 400
    assert "Idempotency-Key" in details(response)
    assert jobs == [] and counts(db) == (0, 0)


# -- dry run --------------------------------------------------------------------------


@pytest.fixture
def providers(sample_catalog):
    """The sample hosts registered as placement providers (what the scheduler reads)."""
    from fleetflow.persistence import fleet
    from fleetflow.persistence.models import Host

    with sample_catalog.session() as session:
        for host in session.scalars(sa.select(Host)):
            # The sample hosts have no disk; every flavor asks for some.
            host.inventory = {**host.inventory, "DISK_GB": {"total": 2000}}
        session.flush()
        fleet.register_providers(session)
    return sample_catalog


def test_dry_run_says_it_fits_and_writes_nothing(reserve, providers, jobs, db):
    response = reserve(count=2, query="?dry_run=true")

    assert response.status_code == 200, response.json
    verdict = response.json["dry_run"]
    assert verdict["fits"] is True
    assert verdict["placed"] == 2 and verdict["min_count"] == 2
    assert sum(verdict["hosts"].values()) == 2
    assert jobs == [] and counts(db) == (0, 0)


def test_dry_run_explains_why_it_does_not_fit(reserve, providers, jobs, db):
    response = reserve(count=1, capabilities={"sticker": "green"}, query="?dry_run=true")

    assert response.status_code == 200
    verdict = response.json["dry_run"]
    assert verdict["fits"] is False
    assert "capabilities" in verdict["explanation"]
    assert jobs == [] and counts(db) == (0, 0)


def test_dry_run_still_validates(reserve, providers, jobs, db):
    response = reserve(count=1, flavor_ref="nope", query="?dry_run=true")

    assert response.status_code == 400
    assert "flavor_ref" in details(response)


# -- GET ------------------------------------------------------------------------------


def test_show_has_the_full_shape(reserve, client, member_headers, db):
    rid = reserve(count=2, name="calc").json["reservation"]["id"]
    with db.session() as session:
        first, second = rows.instance_ids(session, rid)
        rows.update_instance(session, first, status=states.ACTIVE, host="host-001",
                             attempts=2, hosts_tried=["host-002", "host-001"])
        rows.update_instance(session, second, status=states.ERROR, host="host-003",
                             attempts=1, hosts_tried=["host-003"],
                             fault=rows.fault("BUILD_FAILED", "disk full", "boot",
                                              "host-003"))
        rows.set_status(session, rid, states.PARTIAL,
                        fault=rows.fault("PARTIAL", "1 of 2 failed"))

    response = client.get(f"{URL}/{rid}", headers=member_headers)

    assert response.status_code == 200
    reservation = response.json["reservation"]
    assert set(reservation) >= {"id", "name", "status", "policy", "flow_id", "created_at",
                                "updated_at", "progress", "instances", "fault"}
    assert reservation["status"] == "PARTIAL" and reservation["name"] == "calc"
    assert reservation["progress"] == {"total": 2, "active": 1, "building": 0, "error": 1,
                                       "reverted": 0, "deleted": 0}
    assert reservation["fault"] == {"code": "PARTIAL", "message": "1 of 2 failed",
                                    "step": None, "host": None}
    active, failed = reservation["instances"]
    assert active == {"id": first, "name": "calc-0000", "host": "host-001",
                      "host_id": opaque_id("tenant-a", "host-001"),
                      "status": "ACTIVE", "task_state": None, "attempts": 2,
                      "hosts_tried": ["host-002", "host-001"], "fault": None}
    assert failed["fault"] == {"code": "BUILD_FAILED", "message": "disk full",
                               "step": "boot", "host": "host-003"}


def test_list_is_paginated_newest_first_and_filtered_by_status(reserve, client,
                                                               member_headers, db):
    ids = [reserve(count=1).json["reservation"]["id"] for _ in range(3)][::-1]
    set_status(db, ids[0], states.ACTIVE)

    page = client.get(f"{URL}?limit=2", headers=member_headers).json
    assert [r["id"] for r in page["reservations"]] == ids[:2]
    assert page["reservations"][0]["progress"]["total"] == 1
    (link,) = page["links"]
    rest = client.get(link["href"], headers=member_headers).json
    assert [r["id"] for r in rest["reservations"]] == ids[2:]
    assert rest["links"] == []

    active = client.get(f"{URL}?status=ACTIVE", headers=member_headers).json
    assert [r["id"] for r in active["reservations"]] == [ids[0]]
    assert active["reservations"][0]["progress"]["active"] == 1
    assert client.get(f"{URL}?status=HAPPY", headers=member_headers).status_code == 400
    unknown = client.get(f"{URL}?marker=r-000000000000", headers=member_headers)
    assert unknown.status_code == 400 and "marker" in unknown.json["errors"][0]["detail"]


def test_reader_may_list_and_show(reserve, client, reader_headers):
    rid = reserve(count=1).json["reservation"]["id"]

    assert client.get(URL, headers=reader_headers).json["reservations"][0]["id"] == rid
    assert client.get(f"{URL}/{rid}", headers=reader_headers).status_code == 200


def test_another_tenants_reservation_is_404(reserve, client, make_headers, admin_headers):
    rid = reserve(count=1).json["reservation"]["id"]
    other = make_headers("tenant-b", "member", "reader")

    assert client.get(f"/v2/tenant-b/reservations/{rid}", headers=other).status_code == 404
    assert client.get("/v2/tenant-b/reservations", headers=other).json["reservations"] == []
    assert client.delete(f"/v2/tenant-b/reservations/{rid}",
                         headers=other).status_code == 404
    # The owner's path is refused to them outright.
    assert client.get(f"{URL}/{rid}", headers=other).status_code == 403
    # An administrator sees it under its owner's path.
    assert client.get(f"{URL}/{rid}", headers=admin_headers).status_code == 200


def test_unknown_reservation_is_404(client, member_headers):
    response = client.get(f"{URL}/r-000000000000", headers=member_headers)

    assert response.status_code == 404
    assert response.json["errors"][0]["code"] == "fleetflow.not_found"


# -- DELETE ---------------------------------------------------------------------------


def test_delete_of_a_settled_reservation_posts_its_teardown(reserve, client, member_headers,
                                                            jobs, db):
    rid = reserve(count=2).json["reservation"]["id"]
    set_status(db, rid, states.ACTIVE)
    jobs.clear()

    response = client.delete(f"{URL}/{rid}", headers=member_headers)

    assert response.status_code == 202
    assert response.json["reservation"]["status"] == "DELETING"
    assert response.json["reservation"]["links"][0]["href"].endswith(f"{URL}/{rid}")
    ((name, kwargs, _options),) = jobs
    with db.session() as session:
        assert kwargs == {"instance_ids": rows.instance_ids(session, rid),
                          "reservation_id": rid}
    assert name == "reservation-teardown"
    # A second DELETE while it is deleting posts nothing more.
    assert client.delete(f"{URL}/{rid}", headers=member_headers).status_code == 202
    assert len(jobs) == 1


def test_a_deleted_reservation_counts_its_instances_as_deleted(reserve, client,
                                                              member_headers, db):
    rid = reserve(count=3).json["reservation"]["id"]
    with db.session() as session:
        first, *others = rows.instance_ids(session, rid)
        rows.update_instance(session, first, status=states.REVERTED)
        rows.update_instances(session, others, status=states.DELETED)
        rows.set_status(session, rid, states.DELETED)

    response = client.get(f"{URL}/{rid}", headers=member_headers)

    assert response.status_code == 200
    # Each instance by what happened to it: one undone by its build's revert,
    # two built and then deleted on request.
    assert response.json["reservation"]["progress"] == {
        "total": 3, "active": 0, "building": 0, "error": 0, "reverted": 1, "deleted": 2}
    listed = client.get(URL, headers=member_headers).json["reservations"]
    assert [r["progress"] for r in listed if r["id"] == rid] == [
        response.json["reservation"]["progress"]]


def test_delete_while_building_is_409(reserve, client, member_headers, jobs):
    rid = reserve(count=1).json["reservation"]["id"]
    jobs.clear()

    response = client.delete(f"{URL}/{rid}", headers=member_headers)

    assert response.status_code == 409
    assert jobs == []


def test_reader_may_not_delete(reserve, client, reader_headers, jobs, db):
    rid = reserve(count=1).json["reservation"]["id"]
    set_status(db, rid, states.ACTIVE)
    jobs.clear()

    assert client.delete(f"{URL}/{rid}", headers=reader_headers).status_code == 403
    assert jobs == []


def test_concurrent_retries_with_one_key_make_one_reservation_on_postgresql(pg_url,
                                                                            make_conf):
    """Eight retries of one POST at the same moment: one reservation, one job, all 202."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from fleetflow.api.app import create_app
    from fleetflow.persistence.db import Database
    from fleetflow.persistence.models import Flavor, Image
    from fleetflow.services.reservations import ReservationOps

    conf = make_conf(database={"connection": pg_url})
    database = Database(pg_url)
    database.upgrade()
    with database.session() as session:
        session.add_all([Flavor(id="1", name="m1.small", vcpus=1, ram_mb=2048, disk_gb=20,
                                extra_specs={}),
                         Image(id="33333333-3333-3333-3333-333333333333", name="cirros",
                               min_disk_gb=1, min_ram_mb=64)])
    posted = []
    operations = ReservationOps(conf, database, submit=lambda *a, **kw: posted.append(a))
    app = create_app(conf, database=database, services={"reservations": operations})
    start = threading.Barrier(8)
    headers = {"X-Project-Id": "tenant-a", "X-Roles": "member", "Idempotency-Key": "same"}

    def post(_):
        client = app.test_client()
        start.wait()
        return client.post(URL, headers=headers, json={"reservation": {
            "count": 2, "flavor_ref": "m1.small", "image_ref": "cirros"}})

    try:
        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(post, range(8)))

        assert [r.status_code for r in responses] == [202] * 8, [r.json for r in responses]
        assert len({r.json["reservation"]["id"] for r in responses}) == 1
        assert len(posted) == 1
        assert counts(database) == (1, 2)
    finally:
        database.dispose()
