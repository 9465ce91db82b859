"""when_full=queue over the API, for reservations and virtual clusters: QUEUED at once,
the queue field, the admin's list, cancelling, and bad queue fields refused before
anything is written."""

from __future__ import annotations

import pytest

from fleetflow.common import states
from fleetflow.persistence import queue as queue_rows
from fleetflow.services.queue import admission

URL = "/v2/tenant-a/reservations"


@pytest.fixture
def api_services(recording_services):
    return recording_services


@pytest.fixture
def reserve(client, member_headers, sample_catalog):
    def _reserve(**fields):
        fields.setdefault("flavor_ref", "m1.small")
        fields.setdefault("image_ref", "cirros")
        return client.post(URL, json={"reservation": fields}, headers=member_headers)

    return _reserve


def test_a_queued_reservation_waits_shows_its_place_and_is_cancelled(
        reserve, client, member_headers, admin_headers, jobs, conf, db, recording_services):
    first = reserve(count=2, when_full="queue", priority=1)
    second = reserve(count=3, when_full="queue", queue_timeout=30)
    assert first.status_code == second.status_code == 202
    assert first.json["reservation"]["status"] == states.QUEUED
    assert jobs == []  # no flow until it is admitted
    # A pass over a cloud where nothing fits (no host is up in this catalog)
    admission.run_pass(conf, db, recording_services["reservations"])

    rid = second.json["reservation"]["id"]
    shown = client.get(f"{URL}/{rid}", headers=member_headers).json["reservation"]
    assert shown["status"] == states.QUEUED and shown["progress"]["total"] == 0
    queue = shown["queue"]
    assert (queue["position"], queue["ahead"]) == (2, 1)
    assert queue["waiting_since"].endswith("+00:00") and queue["last_attempt"]
    assert queue["why"].startswith("No valid host")
    listed = client.get(URL, headers=member_headers).json["reservations"]
    assert {r["id"]: r["queue"]["position"] for r in listed} == {
        first.json["reservation"]["id"]: 1, rid: 2}

    waiting = client.get("/v2/admin/queue", headers=admin_headers).json["queue"]
    assert [(w["id"], w["position"], w["priority"]) for w in waiting] == [
        (first.json["reservation"]["id"], 1, 1), (rid, 2, 0)]
    assert waiting[1]["deadline"] is not None
    assert client.get("/v2/admin/queue", headers=member_headers).status_code == 403
    page = client.get("/v2/admin/queue?limit=1", headers=admin_headers).json
    assert len(page["queue"]) == 1 and page["links"][0]["rel"] == "next"

    gone = client.delete(f"{URL}/{rid}", headers=member_headers)
    assert gone.status_code == 202 and gone.json["reservation"]["status"] == states.DELETED
    assert jobs == []  # nothing to tear down
    waiting = client.get("/v2/admin/queue", headers=admin_headers).json["queue"]
    assert [w["id"] for w in waiting] == [first.json["reservation"]["id"]]
    assert client.get(f"{URL}/{rid}", headers=member_headers).json["reservation"][
        "queue"] is None


@pytest.mark.parametrize(("fields", "named"), [
    ({"when_full": "wait"}, "when_full"),
    ({"when_full": "queue", "priority": 11}, "priority"),
    ({"when_full": "queue", "priority": -1}, "priority"),
    ({"when_full": "queue", "queue_timeout": 0}, "queue_timeout"),
    ({"when_full": "queue", "queue_timeout": "soon"}, "queue_timeout"),
])
def test_bad_queue_fields_are_400_naming_the_field(reserve, client, admin_headers, fields,
                                                   named):
    response = reserve(count=1, **fields)
    assert response.status_code == 400
    assert named in str(response.json["errors"])
    assert client.get("/v2/admin/queue", headers=admin_headers).json["queue"] == []


VCLUSTERS = "/v2/tenant-a/vclusters"


def _cluster(**fields) -> dict:
    servers = [{"name": f"node-{i}", "type": "server",
                "spec": {"imageRef": "cirros", "flavorRef": "m1.small"}} for i in range(2)]
    return {"vcluster": {"name": "job", "instances": servers, **fields}}


def test_a_queued_vcluster_waits_shows_its_place_and_is_cancelled(
        reserve, client, member_headers, admin_headers, jobs, conf, db, recording_services):
    ahead = reserve(count=1, when_full="queue", priority=2).json["reservation"]["id"]
    posted = client.post(VCLUSTERS, json=_cluster(when_full="queue", priority=2,
                                                  queue_timeout=600), headers=member_headers)
    assert posted.status_code == 202 and posted.json["vcluster"]["status"] == states.QUEUED
    vid = posted.json["vcluster"]["id"]
    assert jobs == []  # no build until it is admitted
    admission.run_pass(conf, db, {queue_rows.KIND_RESERVATION: recording_services[
        "reservations"], queue_rows.KIND_VCLUSTER: recording_services["vclusters"]})

    shown = client.get(f"{VCLUSTERS}/{vid}", headers=member_headers).json["vcluster"]
    assert shown["status"] == states.QUEUED and shown["instances"] == []
    assert (shown["queue"]["position"], shown["queue"]["ahead"]) == (2, 1)
    assert shown["queue"]["why"] and shown["queue"]["last_attempt"]
    waiting = client.get("/v2/admin/queue", headers=admin_headers).json["queue"]
    assert [(w["kind"], w["id"]) for w in waiting] == [("reservation", ahead),
                                                      ("vcluster", vid)]
    assert waiting[1]["deadline"] is not None
    listed = client.get(f"{VCLUSTERS}?status=QUEUED", headers=member_headers).json
    assert [v["id"] for v in listed["vclusters"]] == [vid]

    # The same Idempotency-Key with other queue fields is a changed request.
    headers = {**member_headers, "Idempotency-Key": "k1"}
    assert client.post(VCLUSTERS, json=_cluster(when_full="queue"),
                       headers=headers).status_code == 202
    again = client.post(VCLUSTERS, json=_cluster(when_full="fail"), headers=headers)
    assert again.status_code == 422 and "when_full" in str(again.json)

    gone = client.delete(f"{VCLUSTERS}/{vid}", headers=member_headers)
    assert gone.status_code == 202 and gone.json["vcluster"]["status"] == states.DELETED
    assert jobs == []  # nothing to tear down
    assert vid not in [w["id"] for w in client.get(
        "/v2/admin/queue", headers=admin_headers).json["queue"]]


@pytest.mark.parametrize(("fields", "named"), [
    ({"when_full": "wait"}, "when_full"),
    ({"when_full": "queue", "priority": 11}, "priority"),
    ({"when_full": "queue", "queue_timeout": 0}, "queue_timeout"),
])
def test_bad_queue_fields_of_a_vcluster_are_400(client, member_headers, admin_headers,
                                                 sample_catalog, fields, named):
    response = client.post(VCLUSTERS, json=_cluster(**fields), headers=member_headers)
    assert response.status_code == 400
    assert named in str(response.json["errors"])
    assert client.get("/v2/admin/queue", headers=admin_headers).json["queue"] == []
    assert client.get(VCLUSTERS, headers=member_headers).json["vclusters"] == []
