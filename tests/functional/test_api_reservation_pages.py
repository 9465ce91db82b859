"""GET /v2/{tenant_id}/reservations/{id}: its instances a page at a time, or none.

``instance_limit`` (default ``[api] page_size``) and ``instance_marker`` page
the instances by index; ``instance_links`` names the next page while more
remain; ``instance_limit=0`` answers the reservation and its progress alone.
"""

from __future__ import annotations

import urllib.parse

import pytest

from fleetflow.common import states
from fleetflow.persistence import reservations as rows

URL = "/v2/tenant-a/reservations"


def make_reservation(db, tenant: str, count: int, active: int = 0) -> str:
    """A BUILDING reservation of ``count`` instances, the first ``active`` of them ACTIVE."""
    with db.session() as session:
        rid = rows.create(session, tenant_id=tenant, user_id="u", name="paged",
                          policy=states.ALL_OR_NOTHING, request={}, count=count,
                          flavor_id="f-1", image_id="i-1", group_id=None).id
        rows.set_status(session, rid, states.BUILDING)
    with db.session() as session:
        ids = rows.instance_ids(session, rid)
        rows.update_instances(session, ids[:active], status=states.ACTIVE, host="host-001")
    return rid


def instance_ids(db, rid: str) -> list[str]:
    with db.session() as session:
        return rows.instance_ids(session, rid)


def get(client, headers, url: str):
    response = client.get(url, headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.json["reservation"]


def next_href(body: dict) -> str | None:
    links = [link["href"] for link in body.get("instance_links", []) if link["rel"] == "next"]
    assert len(links) <= 1
    return links[0] if links else None


def details(response) -> str:
    return " ".join(e["detail"] for e in response.json["errors"])


@pytest.mark.parametrize("limit", [1, 3, 7, 10, 11])
def test_pages_cover_every_instance_once_in_order(db, client, member_headers, tenant, limit):
    rid = make_reservation(db, tenant, 10, active=4)
    seen, pages = [], 0
    url = f"{URL}/{rid}?instance_limit={limit}"
    while url is not None:
        body = get(client, member_headers, url)
        assert 0 < len(body["instances"]) <= limit
        assert body["progress"]["total"] == 10
        seen += [i["id"] for i in body["instances"]]
        pages += 1
        url = next_href(body)

    assert seen == instance_ids(db, rid)
    assert pages == -(-10 // limit)


def test_next_link_keeps_the_other_query_args_and_names_the_last_instance(
        db, client, member_headers, tenant):
    rid = make_reservation(db, tenant, 5)

    body = get(client, member_headers, f"{URL}/{rid}?instance_limit=2")

    href = urllib.parse.urlsplit(next_href(body))
    assert href.path == f"{URL}/{rid}"
    assert urllib.parse.parse_qs(href.query) == {
        "instance_limit": ["2"], "instance_marker": [body["instances"][-1]["id"]]}


def test_the_last_page_has_no_instance_links(db, client, member_headers, tenant):
    rid = make_reservation(db, tenant, 4)
    ids = instance_ids(db, rid)

    body = get(client, member_headers, f"{URL}/{rid}?instance_limit=2&instance_marker={ids[1]}")

    assert [i["id"] for i in body["instances"]] == ids[2:]
    assert "instance_links" not in body


def test_a_marker_on_the_last_instance_gives_an_empty_page(db, client, member_headers, tenant):
    rid = make_reservation(db, tenant, 3)

    body = get(client, member_headers, f"{URL}/{rid}?instance_marker={instance_ids(db, rid)[-1]}")

    assert body["instances"] == [] and "instance_links" not in body


def test_default_page_is_page_size_instances(db, conf, client, member_headers, tenant):
    conf.set_override("page_size", 4, group="api")
    rid = make_reservation(db, tenant, 6)

    body = get(client, member_headers, f"{URL}/{rid}")

    assert [i["id"] for i in body["instances"]] == instance_ids(db, rid)[:4]
    assert next_href(body) is not None


def test_a_small_reservation_answers_as_before_pagination(db, client, member_headers,
                                                          tenant):
    """Every instance, and no key that the body did not have before."""
    rid = make_reservation(db, tenant, 5, active=2)

    body = get(client, member_headers, f"{URL}/{rid}")

    assert set(body) == {"id", "name", "status", "policy", "flow_id", "created_at",
                         "updated_at", "progress", "fault", "queue", "links", "instances"}
    assert [i["id"] for i in body["instances"]] == instance_ids(db, rid)
    assert body == get(client, member_headers, f"{URL}/{rid}?instance_limit=1000")


def test_instance_limit_0_is_the_reservation_and_its_progress(db, client, member_headers,
                                                              tenant):
    rid = make_reservation(db, tenant, 5, active=2)
    full = get(client, member_headers, f"{URL}/{rid}")

    body = get(client, member_headers, f"{URL}/{rid}?instance_limit=0")

    assert "instances" not in body and "instance_links" not in body
    assert body == {key: value for key, value in full.items() if key != "instances"}
    assert body["status"] == states.BUILDING
    assert body["progress"] == {"total": 5, "active": 2, "building": 3, "error": 0,
                                "reverted": 0, "deleted": 0}


def test_progress_counts_the_rows_as_they_change(db, client, member_headers, tenant):
    rid = make_reservation(db, tenant, 6, active=1)
    ids = instance_ids(db, rid)
    with db.session() as session:
        rows.update_instance(session, ids[1], status=states.ERROR)
        rows.update_instances(session, ids[2:4], status=states.REVERTED)
        rows.update_instance(session, ids[4], status=states.DELETED)

    progress = get(client, member_headers, f"{URL}/{rid}?instance_limit=0")["progress"]

    assert progress == {"total": 6, "active": 1, "building": 1, "error": 1, "reverted": 2,
                        "deleted": 1}


@pytest.mark.parametrize("query, field", [
    ("instance_limit=-1", "instance_limit"),
    ("instance_limit=1001", "instance_limit"),
    ("instance_limit=many", "instance_limit"),
    ("instance_limit=", "instance_limit"),
    ("instance_marker=", "instance_marker"),
    ("instance_marker=00000000-0000-0000-0000-000000000000", "instance_marker"),
    ("limit=5", "limit"),
])
def test_bad_page_args_are_400_naming_the_field(db, client, member_headers, tenant, query,
                                                field):
    rid = make_reservation(db, tenant, 3)

    response = client.get(f"{URL}/{rid}?{query}", headers=member_headers)

    assert response.status_code == 400, response.get_data(as_text=True)
    assert f"'{field}'" in details(response)
    assert response.json["errors"][0]["code"] == "fleetflow.invalid_input"


def test_a_marker_of_another_reservation_is_400(db, client, member_headers, tenant):
    rid = make_reservation(db, tenant, 3)
    other = make_reservation(db, tenant, 3)

    response = client.get(f"{URL}/{rid}?instance_marker={instance_ids(db, other)[0]}",
                          headers=member_headers)

    assert response.status_code == 400
    assert "'instance_marker'" in details(response)


def test_the_openapi_document_shows_the_page_args(client):
    spec = client.get("/openapi.json").get_json()
    operation = spec["paths"]["/v2/{tenant_id}/reservations/{reservation_id}"]["get"]

    parameters = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}

    assert set(parameters) == {"instance_limit", "instance_marker"}
    assert parameters["instance_limit"]["schema"]["minimum"] == 0
    assert "0: none" in parameters["instance_limit"]["description"]


# -- the client and the CLI ---------------------------------------------------------------


def test_the_client_follows_every_page_or_asks_for_none(db, conf, live_server, tenant):
    from fleetflow.api.client import Client

    conf.set_override("page_size", 2, group="api")
    rid = make_reservation(db, tenant, 5, active=1)
    client = Client(live_server, project_id=tenant, roles=["reader"])

    full = client.get_reservation(rid)
    summary = client.get_reservation(rid, instances=False)

    assert [i["id"] for i in full["instances"]] == instance_ids(db, rid)
    assert "instance_links" not in full
    assert "instances" not in summary and summary["progress"] == full["progress"]


def test_watch_polls_the_summary_and_reads_the_instances_once_settled():
    from fleetflow.cli import reservations as reservations_cli

    class RecordingClient:
        def __init__(self, *statuses):
            self.statuses = list(statuses)
            self.asked = []

        def get_reservation(self, reservation_id, instances=True):
            self.asked.append(instances)
            body = {"id": reservation_id, "status": self.statuses[0],
                    "progress": {"total": 1, "active": 0, "building": 1, "error": 0,
                                 "reverted": 0}}
            if len(self.statuses) > 1:
                self.statuses.pop(0)
            return {**body, "instances": []} if instances else body

    quiet = RecordingClient("BUILDING", "BUILDING", "ACTIVE")
    assert "instances" not in reservations_cli.watch(quiet, "r-1", 0, show_bar=False)
    assert quiet.asked == [False, False, False]

    with_instances = RecordingClient("BUILDING", "ACTIVE")
    final = reservations_cli.watch(with_instances, "r-1", 0, show_bar=False, instances=True)
    assert final["instances"] == [] and with_instances.asked == [False, False, True]
