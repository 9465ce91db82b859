"""when_full=queue over the API: QUEUED at once, the queue field, the admin's list,
cancelling, and bad queue fields refused before anything is written."""

from __future__ import annotations

import pytest

from fleetflow.common import states
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
