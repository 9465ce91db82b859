"""/placement routes beyond providers and allocations: the reshaper (atomic, generations
checked), provider aggregates and member_of, resource classes, trait deletion."""

from __future__ import annotations

import uuid

V = "OpenStack-API-Version"


def headers(version: str = "latest") -> dict:
    return {"X-Auth-Token": "admin", V: f"placement {version}"}


H = headers()
# The reshaper is a service's (Nova's) by Placement's default policy, not an admin's.
SERVICE = {"X-Auth-Token": "nova", "X-Roles": "service", V: "placement latest"}


def new_provider(client, name, parent=None) -> str:
    body = {"name": name} | ({"parent_provider_uuid": parent} if parent else {})
    r = client.post("/placement/resource_providers", json=body, headers=H)
    assert r.status_code == 200, r.json
    return r.json["uuid"]


def generation(client, rp) -> int:
    return client.get(f"/placement/resource_providers/{rp}", headers=H).json["generation"]


def usages(client, rp) -> dict:
    return client.get(f"/placement/resource_providers/{rp}/usages", headers=H).json["usages"]


def test_reshaper_moves_inventory_and_allocations_to_a_child_at_once(client):
    parent = new_provider(client, "cn")
    child = new_provider(client, "numa0", parent)
    r = client.put(f"/placement/resource_providers/{parent}/inventories", headers=H, json={
        "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
    assert r.status_code == 200
    consumer = str(uuid.uuid4())
    r = client.put(f"/placement/allocations/{consumer}", headers=headers("1.28"), json={
        "allocations": {parent: {"resources": {"VCPU": 2}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": None})
    assert r.status_code == 204
    body = {
        "inventories": {
            parent: {"resource_provider_generation": generation(client, parent),
                     "inventories": {}},
            child: {"resource_provider_generation": generation(client, child),
                    "inventories": {"VCPU": {"total": 8}}}},
        "allocations": {consumer: {
            "allocations": {child: {"resources": {"VCPU": 2}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": 1, "consumer_type": "INSTANCE"}}}
    stale = dict(body, allocations={consumer: dict(body["allocations"][consumer],
                                                   consumer_generation=0)})
    refused = client.post("/placement/reshaper", json=stale, headers=SERVICE)
    assert refused.status_code == 409
    assert usages(client, parent) == {"VCPU": 2} and usages(client, child) == {}
    assert client.post("/placement/reshaper", json=body, headers=SERVICE).status_code == 204
    assert usages(client, parent) == {} and usages(client, child) == {"VCPU": 2}
    assert client.post("/placement/reshaper", json=body, headers=SERVICE).status_code == 409


def test_reshaper_needs_1_30(client):
    assert client.post("/placement/reshaper", json={},
                       headers=dict(SERVICE, **{V: "placement 1.29"})).status_code == 404


def test_aggregates_filter_providers_and_repeated_member_of_is_and(client):
    agg_a, agg_b = str(uuid.uuid4()), str(uuid.uuid4())
    both, only_a = new_provider(client, "both"), new_provider(client, "only-a")
    for rp, aggs in ((both, [agg_a, agg_b]), (only_a, [agg_a])):
        r = client.put(f"/placement/resource_providers/{rp}/aggregates", headers=H, json={
            "aggregates": aggs, "resource_provider_generation": generation(client, rp)})
        assert r.status_code == 200 and sorted(r.json["aggregates"]) == sorted(aggs)
        assert r.json["resource_provider_generation"] == 1
    url = "/placement/resource_providers?member_of="

    def names(query, version="latest"):
        r = client.get(url + query, headers=headers(version))
        assert r.status_code == 200, r.json
        return sorted(p["name"] for p in r.json["resource_providers"])

    assert names(agg_a) == ["both", "only-a"]
    assert names(f"{agg_a}&member_of={agg_b}") == ["both"]
    assert names(f"in:{agg_a},{agg_b}") == ["both", "only-a"]
    assert names(f"!{agg_b}") == ["only-a"]
    assert client.get(url + f"{agg_a}&member_of={agg_b}", headers=headers("1.23")
                      ).status_code == 400
    r = client.put(f"/placement/resource_providers/{both}/aggregates", headers=H, json={
        "aggregates": [], "resource_provider_generation": 0})
    assert r.status_code == 409 and r.json["errors"][0]["code"] == \
        "placement.concurrent_update"


def test_custom_resource_class_lifecycle(client):
    url = "/placement/resource_classes/CUSTOM_GOLD"
    assert client.put(url, headers=H).status_code == 201
    assert client.put(url, headers=H).status_code == 204
    assert client.get(url, headers=H).json["name"] == "CUSTOM_GOLD"
    assert client.put("/placement/resource_classes/GOLD", headers=H).status_code == 400
    assert client.delete("/placement/resource_classes/VCPU", headers=H).status_code == 400
    rp = new_provider(client, "gold")
    r = client.post(f"/placement/resource_providers/{rp}/inventories", headers=H,
                    json={"resource_class": "CUSTOM_GOLD", "total": 3})
    assert r.status_code == 201 and r.headers["Location"].endswith(
        f"/placement/resource_providers/{rp}/inventories/CUSTOM_GOLD")
    assert client.delete(url, headers=H).status_code == 409
    r = client.post(f"/placement/resource_providers/{rp}/inventories", headers=H,
                    json={"resource_class": "CUSTOM_NONE", "total": 3})
    assert r.status_code == 400


def test_custom_trait_delete_and_unknown_traits(client):
    rp = new_provider(client, "t")
    r = client.put(f"/placement/resource_providers/{rp}/traits", headers=H, json={
        "traits": ["CUSTOM_NEW"], "resource_provider_generation": 0})
    assert r.status_code == 400 and "CUSTOM_NEW" in r.json["errors"][0]["detail"]
    assert client.put("/placement/traits/CUSTOM_NEW", headers=H).status_code == 201
    assert client.delete("/placement/traits/HW_CPU_X86_AVX2", headers=H).status_code == 400
    r = client.put(f"/placement/resource_providers/{rp}/traits", headers=H, json={
        "traits": ["CUSTOM_NEW"], "resource_provider_generation": 0})
    assert r.status_code == 200
    associated = client.get("/placement/traits?associated=true", headers=H).json["traits"]
    assert associated == ["CUSTOM_NEW"]
    assert client.delete("/placement/traits/CUSTOM_NEW", headers=H).status_code == 409
    client.delete(f"/placement/resource_providers/{rp}/traits", headers=H)
    assert client.delete("/placement/traits/CUSTOM_NEW", headers=H).status_code == 204
    assert client.delete("/placement/traits/CUSTOM_NEW", headers=H).status_code == 404


def test_http_rules(client):
    r = client.options("/placement/resource_providers", headers=H)
    assert r.status_code == 405 and sorted(r.headers["Allow"].split(", ")) == ["GET", "POST"]
    assert r.headers[V] == "placement 1.39"
    r = client.delete("/placement/", headers=headers("1.0"))
    assert r.status_code == 405 and r.headers["Allow"] == "GET"
    assert r.json["errors"][0]["code"] == "placement.undefined_code"
    assert client.get("/placement/").status_code == 200  # no credentials needed
    assert client.get("/placement/resource_providers").status_code == 401
    r = client.get("/placement/resource_providers", headers=headers("1.15"))
    assert r.headers["Cache-Control"] == "no-cache" and "Last-Modified" in r.headers
    assert "Cache-Control" not in client.get("/placement/resource_providers",
                                             headers=headers("1.14")).headers
    r = client.get("/placement/resource_providers", headers=dict(H, Accept="text/plain"))
    assert r.status_code == 406
    assert client.get("/placement/", headers=headers("0.9")).status_code == 406


def test_candidates_span_a_tree_and_its_sharing_provider(client):
    cn = new_provider(client, "cn")
    numa = new_provider(client, "cn-numa0", cn)
    disk = new_provider(client, "shared-disk")
    aggregate = str(uuid.uuid4())
    for rp, inventories in ((numa, {"VCPU": {"total": 4}}), (disk, {"DISK_GB": {"total": 100}})):
        r = client.put(f"/placement/resource_providers/{rp}/inventories", headers=H, json={
            "resource_provider_generation": 0, "inventories": inventories})
        assert r.status_code == 200
    r = client.put(f"/placement/resource_providers/{disk}/traits", headers=H, json={
        "traits": ["MISC_SHARES_VIA_AGGREGATE"], "resource_provider_generation": 1})
    assert r.status_code == 200
    for rp in (cn, disk):
        r = client.put(f"/placement/resource_providers/{rp}/aggregates", headers=H, json={
            "aggregates": [aggregate], "resource_provider_generation": generation(client, rp)})
        assert r.status_code == 200
    url = "/placement/allocation_candidates?resources=VCPU:2,DISK_GB:10"
    found = client.get(url, headers=H).json
    assert [r["allocations"] for r in found["allocation_requests"]] == [
        {numa: {"resources": {"VCPU": 2}}, disk: {"resources": {"DISK_GB": 10}}}]
    assert set(found["provider_summaries"]) == {cn, numa, disk}
    # Before 1.29 a tree lends one provider, and its root has no VCPU.
    old = client.get(url, headers=headers("1.28")).json
    assert old["allocation_requests"] == [{"allocations": {
        numa: {"resources": {"VCPU": 2}}, disk: {"resources": {"DISK_GB": 10}}}}]
    assert client.get(url + f"&in_tree={cn}", headers=H).json["allocation_requests"] == []
    assert client.get(url + "&required=CUSTOM_NOPE", headers=H).status_code == 400


def test_candidates_of_suffixed_groups_honour_isolate_and_same_subtree(client):
    cn = new_provider(client, "cn")
    pfs = [new_provider(client, f"pf{i}", cn) for i in (1, 2)]
    for pf in pfs:
        r = client.put(f"/placement/resource_providers/{pf}/inventories", headers=H, json={
            "resource_provider_generation": 0, "inventories": {"SRIOV_NET_VF": {"total": 8}}})
        assert r.status_code == 200
    url = "/placement/allocation_candidates?resources1=SRIOV_NET_VF:4&resources2=SRIOV_NET_VF:4"

    def found(query):
        r = client.get(url + query, headers=H)
        assert r.status_code == 200, r.json
        return r.json["allocation_requests"]

    isolated = found("&group_policy=isolate")
    assert len(isolated) == 2
    assert all(len(r["allocations"]) == 2 for r in isolated)
    assert {tuple(r["mappings"]["1"] + r["mappings"]["2"]) for r in isolated} == {
        (pfs[0], pfs[1]), (pfs[1], pfs[0])}
    shared = found("&group_policy=none")
    assert {pfs[0]: {"resources": {"SRIOV_NET_VF": 8}}} in [r["allocations"] for r in shared]
    assert found("&group_policy=isolate&same_subtree=1,2") == []
    r = client.get(url, headers=H)
    assert r.status_code == 400 and "group_policy" in r.json["errors"][0]["detail"]
