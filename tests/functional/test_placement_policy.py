"""/placement speaks Placement's security model: its per-route rules and their defaults,
system scope, [oslo_policy] enforce_new_defaults, the policy file as oslo.policy finds
it, CORS (for /v2 too), and two of Placement's cheap behaviours (generations of the
provider that loses an allocation, error bodies that follow Accept)."""

from __future__ import annotations

import uuid

import pytest
import yaml

from fleetflow.api.app import create_app

V = "OpenStack-API-Version"
LATEST = {V: "placement latest"}
ADMIN = {"X-Auth-Token": "admin", **LATEST}
SERVICE = {"X-Auth-Token": "nova", "X-Roles": "service", **LATEST}
SYSTEM_ADMIN = {"X-Auth-Token": "user", "X-Roles": "admin,member,reader",
                "OpenStack-System-Scope": "all", **LATEST}


def project(name: str, *roles: str) -> dict:
    return {"X-Auth-Token": f"user:{name}", "X-Roles": ",".join(roles), **LATEST}


def app_for(make_conf, db, **groups):
    return create_app(make_conf(**groups), database=db).test_client()


def new_provider(client) -> str:
    r = client.post("/placement/resource_providers", json={"name": str(uuid.uuid4())},
                    headers=ADMIN)
    assert r.status_code == 200, r.json
    return r.json["uuid"]


def reshape_body(client, rp) -> dict:
    generation = client.get(f"/placement/resource_providers/{rp}", headers=ADMIN).json[
        "generation"]
    return {"inventories": {rp: {"resource_provider_generation": generation,
                                 "inventories": {"VCPU": {"total": 4}}}},
            "allocations": {}}


def test_new_defaults_tell_admins_services_and_project_readers_apart(client):
    rp = new_provider(client)
    body = reshape_body(client, rp)
    assert client.post("/placement/reshaper", json=body, headers=ADMIN).status_code == 403
    assert client.post("/placement/reshaper", json=body, headers=SERVICE).status_code == 204
    usages = "/placement/usages?project_id=p1"
    assert client.get(usages, headers=project("p1", "reader")).status_code == 200
    assert client.get(usages, headers=project("p2", "member", "reader")).status_code == 403
    assert client.get(usages, headers=project("p2", "admin")).status_code == 200
    refused = client.get("/placement/resource_providers", headers=project("p1", "member"))
    assert refused.status_code == 403
    assert "placement:resource_providers:list" in refused.json["errors"][0]["detail"]


def test_a_system_scoped_admin_passes_no_project_scoped_rule(client):
    assert client.get("/placement/resource_providers", headers=SYSTEM_ADMIN).status_code == 403
    assert client.get("/placement/resource_providers", headers=ADMIN).status_code == 200
    # /v2 too, where the system scope comes as a header without a project.
    system = {"X-Roles": "admin", "OpenStack-System-Scope": "all"}
    assert client.get("/v2/admin/hosts", headers=system).status_code == 403
    assert client.get("/v2/admin/hosts", headers={"X-Roles": "admin"}).status_code == 401
    # Version discovery needs no credentials at all.
    assert client.get("/placement/", headers=SYSTEM_ADMIN).status_code == 200


def test_the_deprecated_defaults_let_an_admin_reshape(make_conf, db):
    client = app_for(make_conf, db, oslo_policy={"enforce_new_defaults": False})
    rp = new_provider(client)
    assert client.post("/placement/reshaper", json=reshape_body(client, rp),
                       headers=ADMIN).status_code == 204


def test_a_policy_file_in_the_working_directory_overrides_new_and_old_names(
        make_conf, db, tmp_path, monkeypatch):
    conf = make_conf()
    conf.set_override("policy_file", "policy.yaml", group="api")
    # The old name of every read still applies where the new name is not overridden.
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({
        "placement:read": "@", "placement:resource_providers:create": "role:member"}))
    monkeypatch.chdir(tmp_path)
    client = create_app(conf, database=db).test_client()
    member = project("p1", "member")
    assert client.get("/placement/resource_providers", headers=member).status_code == 200
    created = client.post("/placement/resource_providers", json={"name": "by-member"},
                          headers=member)
    assert created.status_code == 200
    assert client.delete(f"/placement/resource_providers/{created.json['uuid']}",
                         headers=member).status_code == 403


def test_cors_answers_allowed_origins_on_placement_and_v2(make_conf, db):
    origin = "http://console.example.com"
    client = app_for(make_conf, db, cors={"allowed_origin": [origin]})
    for path in ("/placement/resource_providers", "/v2/admin/hosts"):
        preflight = client.options(path, headers={
            "Origin": origin, "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "X-Auth-Token"})
        assert preflight.status_code == 200
        assert preflight.headers["Access-Control-Allow-Origin"] == origin
        assert "X-Auth-Token" in preflight.headers["Access-Control-Allow-Headers"]
        other = client.options(path, headers={"Origin": "http://elsewhere.example.com",
                                              "Access-Control-Request-Method": "GET"})
        assert "Access-Control-Allow-Origin" not in other.headers
    # A 401 carries the header too, so the browser lets the page read it.
    answer = client.get("/v2/admin/hosts", headers={"Origin": origin})
    assert answer.status_code == 401
    assert answer.headers["Access-Control-Allow-Origin"] == origin


def test_without_cors_options_no_cors_headers(client):
    answer = client.get("/placement/", headers={"Origin": "http://console.example.com"})
    assert "Access-Control-Allow-Origin" not in answer.headers


def test_the_provider_that_loses_an_allocation_keeps_its_generation(client):
    rp = new_provider(client)
    r = client.put(f"/placement/resource_providers/{rp}/inventories", headers=ADMIN,
                   json={"resource_provider_generation": 0,
                         "inventories": {"VCPU": {"total": 2}}})
    assert r.status_code == 200
    candidates = "/placement/allocation_candidates?resources=VCPU:2"

    def generation():
        return client.get(f"/placement/resource_providers/{rp}", headers=ADMIN).json[
            "generation"]

    def allocate(consumer, resources, consumer_generation):
        allocations = {rp: {"resources": resources}} if resources else {}
        r = client.put(f"/placement/allocations/{consumer}",
                       headers=dict(ADMIN, **{V: "placement 1.28"}), json={
            "allocations": allocations, "project_id": "p", "user_id": "u",
            "consumer_generation": consumer_generation})
        assert r.status_code == 204, r.json

    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    allocate(first, {"VCPU": 2}, None)
    assert generation() == 2
    assert client.get(candidates, headers=ADMIN).json["allocation_requests"] == []
    # DELETE: no allocation record names the provider, so its generation stays...
    assert client.delete(f"/placement/allocations/{first}", headers=ADMIN).status_code == 204
    assert generation() == 2
    # ... and yet the capacity it freed is seen at once.
    assert len(client.get(candidates, headers=ADMIN).json["allocation_requests"]) == 1
    # Writing a consumer empty names its providers (records of 0): they are bumped.
    allocate(second, {"VCPU": 1}, None)
    assert generation() == 3
    allocate(second, {}, 1)
    assert generation() == 4


@pytest.mark.parametrize(("accept", "mimetype"), [
    ("text/html", "text/html"), ("application/json", "application/json"),
    ("text/plain", "text/plain"), (None, "application/json")])
def test_placement_error_bodies_follow_accept(client, accept, mimetype):
    headers = dict(ADMIN, **({"Accept": accept} if accept else {}))
    r = client.delete(f"/placement/resource_providers/{uuid.uuid4()}", headers=headers)
    assert r.status_code == 404 and r.mimetype == mimetype
    if mimetype == "text/html":
        assert r.text.startswith("<html>") and "<h1>404 Not Found</h1>" in r.text
    elif mimetype == "text/plain":
        assert r.text.startswith("404 Not Found\n\n")
    else:
        assert r.json["errors"][0]["status"] == 404


def test_every_placement_route_is_guarded_by_the_rule_placement_documents_for_it(app):
    from fleetflow.api.placement import policies

    documented = {name: {(method, path) for method, path in operations}
                  for name, _check, operations, _description in policies.ROUTE_RULES}
    guarded = set()
    for rule in app.url_map.iter_rules():
        if not rule.endpoint.startswith("placement.") or rule.endpoint == "placement.versions":
            continue
        name = policies.RULE_OF_ENDPOINT[rule.endpoint]
        path = rule.rule.removeprefix("/placement").replace("<", "{").replace(">", "}")
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            assert (method, path) in documented[name], (rule.endpoint, method, path)
        guarded.add(rule.endpoint)
    assert guarded == set(policies.RULE_OF_ENDPOINT)
    assert set(policies.RULE_OF_ENDPOINT.values()) == set(documented)
