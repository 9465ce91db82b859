"""The /placement API over Flask's test client: the six rules of consumer generations,
one ``test_ruleN`` each: a read returns the generation, a write sends
it, the first writer sends null, a conflict is read, merged and retried, a move between
consumers is all or nothing, writes answer 204 without a body; then the other routes and
errors.
"""

from __future__ import annotations

import uuid

import pytest

V = "OpenStack-API-Version"


def headers(version: str = "1.28") -> dict:
    return {"X-Auth-Token": "admin", V: f"placement {version}"}


H = headers()


def new_uuid() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def make_rp(client):
    """``make_rp(name, VCPU=8, ...)`` -> uuid of a provider with that inventory."""
    def _make(name: str | None = None, traits=(), **totals) -> str:
        r = client.post("/placement/resource_providers", json={"name": name or new_uuid()},
                        headers=headers("1.20"))
        assert r.status_code == 200, r.json
        rp = r.json["uuid"]
        invs = {rc: {"total": total} for rc, total in (totals or {"VCPU": 8}).items()}
        r = client.put(f"/placement/resource_providers/{rp}/inventories", headers=H,
                       json={"resource_provider_generation": 0, "inventories": invs})
        assert r.status_code == 200, r.json
        for custom in (t for t in traits if t.startswith("CUSTOM_")):
            assert client.put(f"/placement/traits/{custom}", headers=H).status_code in (201,
                                                                                      204)
        if traits:
            r = client.put(f"/placement/resource_providers/{rp}/traits", headers=H,
                           json={"resource_provider_generation": 1, "traits": list(traits)})
            assert r.status_code == 200, r.json
        return rp
    return _make


def put(client, consumer, allocations, generation, version="1.28", **extra):
    body = {"allocations": {rp: {"resources": res} for rp, res in allocations.items()},
            "project_id": "proj", "user_id": "user", "consumer_generation": generation}
    body.update(extra)
    return client.put(f"/placement/allocations/{consumer}", json=body,
                      headers=headers(version))


def get(client, consumer, version="1.28"):
    r = client.get(f"/placement/allocations/{consumer}", headers=headers(version))
    assert r.status_code == 200
    return r.json


def error_code(response) -> str:
    error = response.json["errors"][0]
    assert set(error) == {"status", "code", "title", "detail", "request_id"}
    assert error["status"] == response.status_code
    return error["code"]


# -- 1) GET has a required integer consumer_generation ------------------------------------
def test_rule1_get_returns_consumer_generation(client, make_rp):
    rp, consumer = make_rp(), new_uuid()
    assert get(client, consumer) == {"allocations": {}}  # unknown: no generation
    assert put(client, consumer, {rp: {"VCPU": 1}}, None).status_code == 204
    body = get(client, consumer)
    assert body["consumer_generation"] == 1
    assert body["allocations"] == {rp: {"resources": {"VCPU": 1}, "generation": 2}}
    assert (body["project_id"], body["user_id"]) == ("proj", "user")
    assert "consumer_generation" not in get(client, consumer, "1.27")


# -- 2) PUT requires consumer_generation in the payload -------------------------------------
def test_rule2_put_requires_consumer_generation(client, make_rp):
    rp, consumer = make_rp(), new_uuid()
    body = {"allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p",
            "user_id": "u"}
    r = client.put(f"/placement/allocations/{consumer}", json=body, headers=H)
    assert r.status_code == 400 and "consumer_generation" in r.json["errors"][0]["detail"]
    assert get(client, consumer) == {"allocations": {}}
    # Before 1.28 the field does not exist and the write is unconditional.
    r = client.put(f"/placement/allocations/{consumer}", json=body, headers=headers("1.27"))
    assert r.status_code == 204


# -- 3) a first writer sends consumer_generation: null --------------------------------------
def test_rule3_first_writer_sends_null(client, make_rp):
    rp, consumer = make_rp(), new_uuid()
    assert put(client, consumer, {rp: {"VCPU": 2}}, None).status_code == 204
    assert get(client, consumer)["allocations"][rp]["resources"] == {"VCPU": 2}
    # A generation for a consumer that does not exist is stale too.
    assert error_code(put(client, new_uuid(), {rp: {"VCPU": 1}}, 0)) == \
        "placement.concurrent_update"


# -- 4) null when allocations exist: 409, then GET, merge, PUT with the generation ------------
def test_rule4_conflict_then_get_merge_retry(client, make_rp):
    rp1, rp2, consumer = make_rp(), make_rp(DISK_GB=100), new_uuid()
    assert put(client, consumer, {rp1: {"VCPU": 2}}, None).status_code == 204
    second = put(client, consumer, {rp2: {"DISK_GB": 10}}, None)  # another client
    assert second.status_code == 409
    assert error_code(second) == "placement.concurrent_update"
    current = get(client, consumer)
    merged = {rp: entry["resources"] for rp, entry in current["allocations"].items()}
    merged[rp2] = {"DISK_GB": 10}
    assert put(client, consumer, merged, current["consumer_generation"]).status_code == 204
    after = get(client, consumer)
    assert {rp: e["resources"] for rp, e in after["allocations"].items()} == merged
    assert after["consumer_generation"] == current["consumer_generation"] + 1
    # The generation the first client read is stale now.
    stale = put(client, consumer, {rp1: {"VCPU": 1}}, current["consumer_generation"])
    assert stale.status_code == 409 and error_code(stale) == "placement.concurrent_update"


def test_rule4_empty_allocations_with_generation_is_the_safe_delete(client, make_rp):
    rp, consumer = make_rp(), new_uuid()
    put(client, consumer, {rp: {"VCPU": 3}}, None)
    gen = get(client, consumer)["consumer_generation"]
    assert put(client, consumer, {}, gen + 5).status_code == 409
    assert put(client, consumer, {}, gen).status_code == 204
    assert get(client, consumer) == {"allocations": {}}
    usages = client.get(f"/placement/resource_providers/{rp}/usages", headers=H).json
    assert usages["usages"] == {"VCPU": 0}
    # The emptied consumer takes a first writer again, but never the old generation.
    assert put(client, consumer, {rp: {"VCPU": 1}}, gen).status_code == 409
    assert put(client, consumer, {rp: {"VCPU": 1}}, None).status_code == 204


# -- 5) POST /allocations: several consumers, each with its generation, one transaction --------
def _post(client, payload, version="1.28"):
    return client.post("/placement/allocations", json=payload, headers=headers(version))


def _entry(allocations, generation, **extra):
    return dict({"allocations": {rp: {"resources": r} for rp, r in allocations.items()},
                 "project_id": "proj", "user_id": "user",
                 "consumer_generation": generation}, **extra)


def test_rule5_post_moves_allocations_between_consumers(client, make_rp):
    source, dest = make_rp(VCPU=4), make_rp(VCPU=4)
    instance, migration = new_uuid(), new_uuid()
    put(client, instance, {source: {"VCPU": 4}}, None)
    gen = get(client, instance)["consumer_generation"]
    r = _post(client, {migration: _entry({source: {"VCPU": 4}}, None),
                       instance: _entry({dest: {"VCPU": 4}}, gen)})
    assert r.status_code == 204 and r.data == b""
    assert list(get(client, migration)["allocations"]) == [source]
    assert list(get(client, instance)["allocations"]) == [dest]


def test_rule5_post_is_all_or_nothing(client, make_rp):
    rp = make_rp(VCPU=4)
    a, b = new_uuid(), new_uuid()
    put(client, b, {rp: {"VCPU": 1}}, None)
    stale = _post(client, {a: _entry({rp: {"VCPU": 1}}, None),
                           b: _entry({rp: {"VCPU": 2}}, 7)})
    assert stale.status_code == 409 and error_code(stale) == "placement.concurrent_update"
    full = _post(client, {a: _entry({rp: {"VCPU": 1}}, None),
                          b: _entry({rp: {"VCPU": 4}}, 1)})
    assert full.status_code == 409
    assert error_code(full) == "placement.allocation.capacity_exceeded"
    assert get(client, a) == {"allocations": {}}
    assert get(client, b)["allocations"][rp]["resources"] == {"VCPU": 1}
    missing = _post(client, {a: {"allocations": {}, "project_id": "p", "user_id": "u"}})
    assert missing.status_code == 400


# -- 6) both answer 204 No Content ------------------------------------------------------------
def test_rule6_put_and_post_answer_204_without_body(client, make_rp):
    rp = make_rp()
    r = put(client, new_uuid(), {rp: {"VCPU": 1}}, None)
    assert (r.status_code, r.data) == (204, b"")
    r = _post(client, {new_uuid(): _entry({rp: {"VCPU": 1}}, None)})
    assert (r.status_code, r.data) == (204, b"")
    assert r.headers[V] == "placement 1.28"


# -- capacity, constraints, unknown providers, delete -----------------------------------------
def test_capacity_and_constraints_have_their_own_codes(client, make_rp):
    rp = make_rp(VCPU=2)
    r = client.put(f"/placement/resource_providers/{rp}/inventories", headers=H, json={
        "resource_provider_generation": 1,
        "inventories": {"VCPU": {"total": 4, "reserved": 1, "allocation_ratio": 2.0,
                                 "max_unit": 4, "step_size": 2}}})
    assert r.status_code == 200 and r.json["resource_provider_generation"] == 2
    assert error_code(put(client, new_uuid(), {rp: {"VCPU": 3}}, None)) == \
        "placement.allocation.constraint_violated"
    assert error_code(put(client, new_uuid(), {rp: {"VCPU": 6}}, None)) == \
        "placement.allocation.constraint_violated"
    assert put(client, new_uuid(), {rp: {"VCPU": 4}}, None).status_code == 204
    # (4 - 1) * 2.0 = 6: two more fit, four more do not.
    assert error_code(put(client, new_uuid(), {rp: {"VCPU": 4}}, None)) == \
        "placement.allocation.capacity_exceeded"
    assert put(client, new_uuid(), {rp: {"VCPU": 2}}, None).status_code == 204
    assert error_code(put(client, new_uuid(), {rp: {"MEMORY_MB": 2}}, None)) == \
        "placement.allocation.capacity_exceeded"
    assert put(client, new_uuid(), {new_uuid(): {"VCPU": 1}}, None).status_code == 400


def test_delete_allocations(client, make_rp):
    rp, consumer = make_rp(), new_uuid()
    put(client, consumer, {rp: {"VCPU": 1}}, None)
    assert client.delete(f"/placement/allocations/{consumer}", headers=H).status_code == 204
    assert client.delete(f"/placement/allocations/{consumer}", headers=H).status_code == 404
    assert get(client, consumer) == {"allocations": {}}


def test_consumer_type_at_138(client, make_rp):
    rp, consumer = make_rp(), new_uuid()
    assert put(client, consumer, {rp: {"VCPU": 1}}, None, "1.38").status_code == 400
    r = put(client, consumer, {rp: {"VCPU": 1}}, None, "1.38", consumer_type="INSTANCE")
    assert r.status_code == 204
    assert get(client, consumer, "1.38")["consumer_type"] == "INSTANCE"
    r = client.get("/placement/usages?project_id=proj", headers=headers("1.38"))
    assert r.json == {"usages": {"INSTANCE": {"consumer_count": 1, "VCPU": 1}}}
    r = client.get("/placement/usages?project_id=proj", headers=headers("1.9"))
    assert r.json == {"usages": {"VCPU": 1}}


# -- providers, inventories, traits ------------------------------------------------------------
def test_provider_lifecycle(client, make_rp):
    r = client.post("/placement/resource_providers", json={"name": "h-1"},
                    headers=headers("1.19"))
    assert r.status_code == 201 and r.headers["Location"].startswith(
        "http://localhost/placement/resource_providers/")
    dup = client.post("/placement/resource_providers", json={"name": "h-1"}, headers=H)
    assert dup.status_code == 409 and error_code(dup) == "placement.duplicate_name"
    rp = r.headers["Location"].rsplit("/", 1)[1]
    shown = client.get(f"/placement/resource_providers/{rp}", headers=H).json
    assert shown["name"] == "h-1" and shown["root_provider_uuid"] == rp
    assert client.put(f"/placement/resource_providers/{rp}", json={"name": "h-2"},
                      headers=H).json["name"] == "h-2"
    listed = client.get("/placement/resource_providers?name=h-2", headers=H).json
    assert [p["uuid"] for p in listed["resource_providers"]] == [rp]
    assert client.delete(f"/placement/resource_providers/{rp}", headers=H).status_code == 204
    assert client.get(f"/placement/resource_providers/{rp}", headers=H).status_code == 404
    busy = make_rp()
    put(client, new_uuid(), {busy: {"VCPU": 1}}, None)
    r = client.delete(f"/placement/resource_providers/{busy}", headers=H)
    assert r.status_code == 409 and error_code(r) == "placement.resource_provider.inuse"


def test_the_provider_of_a_fleet_host_is_not_deleted_while_the_host_is(small_cloud, client):
    host = "z1-r1-h01"
    rp = small_cloud.host_uuid(host)
    r = client.delete(f"/placement/resource_providers/{rp}", headers=H)
    assert r.status_code == 409 and error_code(r) == "placement.resource_provider.inuse"
    detail = r.json["errors"][0]["detail"]
    assert host in detail and "retire or delete the host first" in detail
    shown = client.get(f"/placement/resource_providers/{rp}", headers=H)
    assert shown.status_code == 200 and shown.json["name"] == host
    # Providers that are no host's are deleted as before.
    r = client.post("/placement/resource_providers", json={"name": "nic"},
                    headers=headers("1.20"))
    assert client.delete(f"/placement/resource_providers/{r.json['uuid']}",
                         headers=H).status_code == 204
    assert small_cloud.audit().clean


NO_GENERATION = [2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**40]


@pytest.mark.parametrize("value", NO_GENERATION)
@pytest.mark.parametrize("route", ["aggregates", "traits", "inventories", "inventories/VCPU",
                                   "allocations", "reshaper"])
def test_a_generation_no_column_holds_is_a_conflict_not_a_500(client, make_rp, route, value):
    rp = make_rp(VCPU=8)
    url = f"/placement/resource_providers/{rp}/{route}"
    body = {"resource_provider_generation": value}
    if route == "aggregates":
        body["aggregates"] = [new_uuid()]
    elif route == "traits":
        body["traits"] = ["HW_CPU_X86_AVX2"]
    elif route == "inventories":
        body["inventories"] = {"VCPU": {"total": 4}}
    elif route == "inventories/VCPU":
        body["total"] = 4
    elif route == "allocations":
        url = f"/placement/allocations/{new_uuid()}"
        body = {"allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p",
                "user_id": "u", "consumer_generation": value}
    else:
        url = "/placement/reshaper"
        body = {"inventories": {rp: {"resource_provider_generation": value,
                                     "inventories": {"VCPU": {"total": 4}}}},
                "allocations": {}}
    before = client.get(f"/placement/resource_providers/{rp}", headers=H).json["generation"]
    method = client.post if route == "reshaper" else client.put
    # The reshaper is a service's by Placement's default policy.
    sent = dict(headers("1.38"), **{"X-Roles": "admin,service"})
    r = method(url, json=body, headers=sent)
    assert r.status_code in (400, 409), r.json
    error_code(r)
    after = client.get(f"/placement/resource_providers/{rp}", headers=H).json["generation"]
    assert after == before


@pytest.mark.parametrize("query", [
    "/placement/resource_providers?resources=VCPU:" + "9" * 40,
    "/placement/allocation_candidates?resources=VCPU:" + "9" * 40,
    "/placement/allocation_candidates?resources=VCPU:1&limit=" + "9" * 40,
])
def test_an_amount_or_limit_no_column_holds_is_answered(client, make_rp, query):
    make_rp(VCPU=8)
    r = client.get(query, headers=headers("1.38"))
    assert r.status_code < 500, r.data[:300]
    if r.status_code == 200:
        body = r.json
        assert body.get("resource_providers", body.get("allocation_requests")) is not None


def test_inventory_generation_and_in_use(client, make_rp):
    rp = make_rp(VCPU=8, DISK_GB=10)
    url = f"/placement/resource_providers/{rp}/inventories"
    stale = client.put(url, headers=H, json={"resource_provider_generation": 0,
                                             "inventories": {"VCPU": {"total": 4}}})
    assert stale.status_code == 409 and error_code(stale) == "placement.concurrent_update"
    put(client, new_uuid(), {rp: {"DISK_GB": 5}}, None)
    gen = client.get(url, headers=H).json["resource_provider_generation"]
    r = client.put(url, headers=H, json={"resource_provider_generation": gen,
                                         "inventories": {"VCPU": {"total": 4}}})
    assert r.status_code == 409 and error_code(r) == "placement.inventory.inuse"
    bad = client.put(url, headers=H, json={"resource_provider_generation": gen,
                                           "inventories": {"VCPU": {"total": 0}}})
    assert bad.status_code == 400


def test_traits_and_candidates(client, make_rp):
    fast = make_rp("fast", traits=["HW_CPU_X86_AVX2"], VCPU=8, MEMORY_MB=4096)
    slow = make_rp("slow", traits=["CUSTOM_SLOW"], VCPU=2, MEMORY_MB=4096)
    r = client.get(f"/placement/resource_providers/{fast}/traits", headers=H)
    assert r.json == {"traits": ["HW_CPU_X86_AVX2"], "resource_provider_generation": 2}
    url = "/placement/allocation_candidates?resources=VCPU:2,MEMORY_MB:1024"
    found = client.get(url, headers=H).json
    assert set(found["provider_summaries"]) == {fast, slow}
    assert found["provider_summaries"][fast]["resources"]["VCPU"] == {"capacity": 8,
                                                                      "used": 0}
    only = client.get(url + "&required=HW_CPU_X86_AVX2", headers=H).json
    assert [list(a["allocations"]) for a in only["allocation_requests"]] == [[fast]]
    assert list(client.get(url + "&required=!HW_CPU_X86_AVX2", headers=H)
                .json["provider_summaries"]) == [slow]
    assert len(client.get(url + "&limit=1", headers=H).json["allocation_requests"]) == 1
    big = client.get("/placement/allocation_candidates?resources=VCPU:4", headers=H).json
    assert list(big["provider_summaries"]) == [fast]
    unknown = client.get(url + "&required=in:CUSTOM_SLOW,CUSTOM_NONE", headers=headers("1.39"))
    assert unknown.status_code == 400 and "CUSTOM_NONE" in unknown.json["errors"][0]["detail"]
    assert client.put("/placement/traits/CUSTOM_NONE", headers=H).status_code == 201
    either = client.get(url + "&required=in:CUSTOM_SLOW,CUSTOM_NONE",
                        headers=headers("1.39")).json
    assert list(either["provider_summaries"]) == [slow]
    assert client.get(url + "&required=in:CUSTOM_SLOW", headers=H).status_code == 400
    assert client.get("/placement/allocation_candidates?resources=VCPU",
                      headers=H).status_code == 400


# -- versions, auth, fences ---------------------------------------------------------------------
def test_microversion_negotiation(client):
    r = client.get("/placement/resource_providers", headers={"X-Auth-Token": "admin"})
    assert r.status_code == 200 and r.headers[V] == "placement 1.0"
    assert "parent_provider_uuid" not in str(r.json)
    r = client.get("/placement/", headers=headers("latest"))
    assert r.headers[V] == "placement 1.39"
    assert r.json["versions"][0]["max_version"] == "1.39"
    assert client.get("/placement/", headers=headers("1.x")).status_code == 400
    r = client.get("/placement/", headers=headers("1.99"))
    assert r.status_code == 406 and error_code(r) == "placement.undefined_code"
    assert client.get("/placement/usages?project_id=p", headers=headers("1.8")).status_code \
        == 404


def test_admin_role_required(client):
    assert client.get("/placement/resource_providers").status_code == 401
    member = {"X-Project-Id": "p", "X-User-Id": "u", "X-Roles": "member", V: "placement 1.28"}
    r = client.get("/placement/resource_providers", headers=member)
    assert r.status_code == 403 and r.headers[V] == "placement 1.28"
    admin = {"X-Project-Id": "p", "X-Roles": "admin"}
    assert client.get("/placement/resource_providers", headers=admin).status_code == 200


def test_stale_fence_refuses_the_write(client, make_rp, db):
    from fleetflow.persistence import fences

    rp = make_rp()
    with db.session() as session:
        old = fences.advance(session, "job-1", "conductor-a")
        fences.advance(session, "job-1", "conductor-b")
    r = client.put(f"/placement/allocations/{new_uuid()}", headers=dict(
        H, **{"FleetFlow-Fence": f"job-1={old['token']}"}), json={
        "allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u",
        "consumer_generation": None})
    assert r.status_code == 409 and error_code(r) == "fleetflow.stale_fence"
    assert client.get(f"/placement/resource_providers/{rp}/usages", headers=H).json[
        "usages"] == {"VCPU": 0}
