"""GET /v2/admin/events and /v2/{tenant}/events: what changed after a cursor."""

from __future__ import annotations


def test_a_host_change_is_seen_after_the_cursor(add_hosts, client, admin_headers):
    add_hosts(["h1", "h2"])
    first = client.get("/v2/admin/events", headers=admin_headers)
    assert first.status_code == 200, first.json
    assert {(e["kind"], e["id"]) for e in first.json["events"]} >= {("host", "h1"),
                                                                   ("host", "h2")}
    cursor = first.json["cursor"]
    quiet = client.get("/v2/admin/events", query_string={"since": cursor},
                       headers=admin_headers).json
    assert quiet["events"] == [] and quiet["cursor"] == cursor

    changed = client.put("/v2/admin/hosts/h2", json={"host": {"state": "maintenance"}},
                         headers=admin_headers)
    assert changed.status_code == 200, changed.json
    answer = client.get("/v2/admin/events", query_string={"since": cursor},
                        headers=admin_headers).json
    assert [(e["kind"], e["id"], e["state"]) for e in answer["events"]] == [
        ("host", "h2", "maintenance")]
    assert answer["cursor"] > cursor
    again = client.get("/v2/admin/events", query_string={"since": answer["cursor"]},
                       headers=admin_headers).json
    assert again["events"] == []


def test_a_member_sees_its_projects_operations_only(small_cloud, client, make_headers):
    assert small_cloud.provision(1) == "SUCCESS"  # a reservation of project t1
    mine = client.get("/v2/t1/events", headers=make_headers("t1", "member"))
    assert mine.status_code == 200, mine.json
    assert [(e["kind"], e["state"], e["tenant_id"]) for e in mine.json["events"]] == [
        ("reservation", "ACTIVE", "t1")]
    other = client.get("/v2/t2/events", headers=make_headers("t2", "member")).json
    assert other["events"] == []
    refused = client.get("/v2/admin/events", headers=make_headers("tenant-a", "member"))
    assert refused.status_code == 403


def test_a_bad_cursor_is_a_400(client, admin_headers):
    answer = client.get("/v2/admin/events", query_string={"since": "yesterday"},
                        headers=admin_headers)
    assert answer.status_code == 400
    assert "since" in answer.json["errors"][0]["detail"]
