"""/v2/admin/flows and /v2/{tenant_id}/flows: operators act, tenants read their own."""

from __future__ import annotations

import pytest

STEP1 = "inst-0001-step"


@pytest.fixture
def paused(flow_engine):
    """A flow of tenant-a paused at its second step."""
    flow_engine.faults.add(STEP1)
    flow_id = flow_engine.submit("tenant-a", 3, on_error="pause")
    assert flow_engine.run_until(flow_id, "PAUSED") == "PAUSED"
    return flow_id


def test_admin_lists_and_shows_a_paused_flow(paused, client, admin_headers):
    listed = client.get("/v2/admin/flows?state=PAUSED", headers=admin_headers)
    assert listed.status_code == 200
    assert [f["id"] for f in listed.json["flows"]] == [paused]
    assert listed.json["flows"][0]["owner_tenant"] == "tenant-a"
    # An in-memory logbook keeps no times; the SQL one does (unit tests).
    assert {"updated_at", "last_progress_at"} <= set(listed.json["flows"][0])
    assert client.get("/v2/admin/flows?state=SUCCESS",
                      headers=admin_headers).json["flows"] == []

    shown = client.get(f"/v2/admin/flows/{paused}", headers=admin_headers)
    assert shown.status_code == 200
    flow = shown.json["flow"]
    assert (flow["state"], flow["paused_at"]) == ("PAUSED", STEP1)
    assert flow["failure"] == {"type": "RuntimeError", "message": f"{STEP1} is broken",
                               "step": STEP1}
    assert [(a["name"], a["state"]) for a in flow["atoms"]] == [
        ("inst-0000-step", "SUCCESS"), (STEP1, "FAILURE"), ("inst-0002-step", "PENDING")]


def test_resume_is_accepted_and_the_flow_finishes(paused, flow_engine, client,
                                                  admin_headers):
    flow_engine.faults.clear()
    answer = client.post(f"/v2/admin/flows/{paused}/resume", headers=admin_headers)
    assert answer.status_code == 202
    assert answer.json["flow"]["state"] == "SUSPENDED"
    assert flow_engine.run_until(paused, "SUCCESS") == "SUCCESS"
    again = client.post(f"/v2/admin/flows/{paused}/resume", headers=admin_headers)
    assert again.status_code == 409
    [error] = again.json["errors"]
    assert (error["status"], error["code"]) == (409, "fleetflow.conflict")
    assert "SUCCESS" in error["detail"] and error["request_id"].startswith("req-")


def test_revert_is_accepted_and_the_flow_reverts(paused, flow_engine, client,
                                                 admin_headers):
    answer = client.post(f"/v2/admin/flows/{paused}/revert", headers=admin_headers)
    assert answer.status_code == 202 and answer.json["flow"]["on_error"] == "revert"
    assert flow_engine.run_until(paused, "REVERTED") == "REVERTED"
    resumed = client.post(f"/v2/admin/flows/{paused}/resume", headers=admin_headers)
    assert resumed.status_code == 409


def test_unknown_flow_is_404_in_the_error_format(flow_engine, client, admin_headers):
    for method, path in (("get", "/v2/admin/flows/nope"),
                         ("post", "/v2/admin/flows/nope/resume"),
                         ("post", "/v2/admin/flows/nope/revert")):
        answer = getattr(client, method)(path, headers=admin_headers)
        assert answer.status_code == 404
        assert answer.json["errors"][0]["code"] == "fleetflow.not_found"


def test_members_cannot_use_the_admin_routes(paused, client, member_headers):
    for method, path in (("get", "/v2/admin/flows"), ("get", f"/v2/admin/flows/{paused}"),
                         ("post", f"/v2/admin/flows/{paused}/resume"),
                         ("post", f"/v2/admin/flows/{paused}/revert")):
        answer = getattr(client, method)(path, headers=member_headers)
        assert answer.status_code == 403, path
        assert answer.json["errors"][0]["code"] == "fleetflow.forbidden"


def test_tenants_see_only_their_own_flows(flow_engine, client, make_headers):
    mine = flow_engine.submit("tenant-a")
    theirs = flow_engine.submit("tenant-b")
    reader = make_headers("tenant-a", "reader")

    listed = client.get("/v2/tenant-a/flows", headers=reader)
    assert listed.status_code == 200
    assert [f["id"] for f in listed.json["flows"]] == [mine]
    assert client.get(f"/v2/tenant-a/flows/{mine}", headers=reader).json["flow"]["id"] == mine
    hidden = client.get(f"/v2/tenant-a/flows/{theirs}", headers=reader)
    assert hidden.status_code == 404
    assert client.get("/v2/tenant-b/flows", headers=reader).status_code == 403


def test_lists_are_paged_newest_first(flow_engine, client, admin_headers):
    ids = [flow_engine.submit("tenant-a", 1) for _ in range(3)][::-1]
    first = client.get("/v2/admin/flows?limit=2", headers=admin_headers).json
    assert [f["id"] for f in first["flows"]] == ids[:2]
    [link] = first["links"]
    assert link["rel"] == "next" and f"marker={ids[1]}" in link["href"]
    rest = client.get(f"/v2/admin/flows?limit=2&marker={ids[1]}", headers=admin_headers).json
    assert [f["id"] for f in rest["flows"]] == ids[2:] and rest["links"] == []
    assert client.get("/v2/admin/flows?state=NOPE", headers=admin_headers).status_code == 400
    for marker in ("no-such-flow", "", "0f0c8a34-5d1e-4c59-9a53-0d2f3e7d6a01"):
        unknown = client.get(f"/v2/admin/flows?marker={marker}", headers=admin_headers)
        assert unknown.status_code == 400 and "marker" in unknown.json["errors"][0]["detail"]
