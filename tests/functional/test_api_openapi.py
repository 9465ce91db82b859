"""The OpenAPI document says what the server does: errors, headers, XML, placement, times."""

from __future__ import annotations

import datetime as dt

import pytest
from defusedxml import ElementTree as SafeET
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate

METHODS = ("get", "put", "post", "delete", "patch")


@pytest.fixture
def spec(client):
    document = client.get("/openapi.json").get_json()
    validate(document)
    return document


def operations(spec):
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method], item.get("parameters", [])


def parameter_names(operation, path_parameters=()) -> set[str]:
    return {p["name"] for p in [*operation.get("parameters", []), *path_parameters]}


def response_schema(spec, path, method, status, media="application/json"):
    """The documented body schema of an answer, with components resolvable."""
    response = spec["paths"][path][method]["responses"][str(status)]
    if "$ref" in response:
        response = spec["components"]["responses"][response["$ref"].rsplit("/", 1)[-1]]
    return {**response["content"][media]["schema"], "components": spec["components"]}


def assert_matches(spec, path, method, response):
    schema = response_schema(spec, path, method, response.status_code)
    OAS30Validator(schema).validate(response.get_json())


def assert_utc(value: str) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(value)
    assert parsed.utcoffset() == dt.timedelta(0), value
    return parsed


# -- errors, headers -------------------------------------------------------------------

def test_every_operation_documents_its_errors_in_the_error_format(spec):
    checked = 0
    for path, method, operation, path_parameters in operations(spec):
        responses = operation["responses"]
        assert "default" not in responses, f"{method} {path}"
        assert {"400", "401", "403", "413"} <= set(responses), f"{method} {path}"
        assert any(s.startswith("2") for s in responses), f"{method} {path} has no success"
        in_path = {p["name"] for p in [*operation.get("parameters", []), *path_parameters]
                   if p["in"] == "path"}
        if in_path - {"tenant_id"}:
            assert "404" in responses, f"{method} {path}"
        if method != "get":
            assert "409" in responses, f"{method} {path}"
        if "requestBody" in operation:
            assert "415" in responses, f"{method} {path}"
        for status in ("400", "401", "403", "404", "409", "413", "415", "422"):
            if status in responses:
                schema = response_schema(spec, path, method, status)
                assert schema["$ref"] == "#/components/schemas/Errors"
        for status, response in responses.items():
            if "$ref" in response:
                response = spec["components"]["responses"][response["$ref"].rsplit("/")[-1]]
            assert "X-OpenStack-Request-Id" in response["headers"], f"{method} {path} {status}"
        checked += 1
    assert checked >= 70


def test_idempotent_posts_document_the_422_and_their_dry_run(spec):
    for path in ("/v2/{tenant_id}/reservations", "/v2/{tenant_id}/vclusters"):
        post = spec["paths"][path]["post"]
        assert {"Idempotency-Key", "dry_run"} <= parameter_names(post), path
        assert {"200", "202", "422"} <= set(post["responses"]), path
        headers = post["responses"]["202"]["headers"]
        assert headers["Location"]["required"] and "Idempotent-Replayed" in headers, path
    for path in ("/v2/admin/evacuations", "/v2/admin/hosts/{name}/evacuate"):
        assert "dry_run" in parameter_names(spec["paths"][path]["post"]), path


def test_identity_headers_are_documented(spec):
    schemes = spec["components"]["securitySchemes"]
    assert schemes["project"]["name"] == "X-Project-Id" and schemes["project"]["description"]
    assert schemes["roles"]["name"] == "X-Roles"
    for path, method, operation, _ in operations(spec):
        assert "X-User-Id" in parameter_names(operation), f"{method} {path}"


# -- XML -------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/v2/{tenant_id}/groups", "/v2/{tenant_id}/vclusters"])
def test_xml_is_documented_where_it_is_spoken(spec, path):
    post = spec["paths"][path]["post"]
    assert "application/xml" in post["requestBody"]["content"]
    assert "XML" in post["requestBody"]["description"]
    for status in ("201", "202"):
        if status in post["responses"]:
            assert "application/xml" in post["responses"][status]["content"]
    assert "application/xml" in spec["paths"][path]["get"]["responses"]["200"]["content"]
    error = spec["paths"][path]["get"]["responses"]["401"]["$ref"].rsplit("/", 1)[-1]
    assert "application/xml" in spec["components"]["responses"][error]["content"]


def test_json_only_routes_do_not_claim_xml(spec):
    post = spec["paths"]["/v2/{tenant_id}/reservations"]["post"]
    assert list(post["requestBody"]["content"]) == ["application/json"]


# -- schemas -----------------------------------------------------------------------------

def test_group_read_only_fields_have_types(spec):
    fields = spec["components"]["schemas"]["GroupFields"]["properties"]
    assert fields["id"]["type"] == "string" and fields["id"]["readOnly"] is True
    assert fields["members"]["type"] == "array" and fields["members"]["readOnly"] is True
    assert "writeOnly" not in fields["id"]


def test_cross_field_rules_are_described(spec):
    schemas = spec["components"]["schemas"]
    assert "min_count" in schemas["ReservationFields"]["description"]
    assert "max_reservation_count" in schemas["ReservationFields"]["description"]
    assert schemas["QuotaLimits"]["minProperties"] == 1
    assert "membersRef" in schemas["VClusterFields"]["description"]


# -- placement -----------------------------------------------------------------------------

def test_every_placement_operation_has_its_answers_and_version_header(spec):
    placement = [(p, m, o) for p, m, o, _ in operations(spec) if p.startswith("/placement")]
    assert len(placement) >= 25
    for path, method, operation in placement:
        assert any(s.startswith("2") for s in operation["responses"]), f"{method} {path}"
        assert "406" in operation["responses"]
        header = [p for p in operation["parameters"] if p["name"] == "OpenStack-API-Version"]
        assert header and "1.39" in header[0]["description"], f"{method} {path}"
        # NOTE: PUT /traits/{name} and (from 1.7) PUT /resource_classes/{name} take no body.
        if method in ("put", "post") and path not in ("/placement/traits/{name}",
                                                      "/placement/resource_classes/{name}"):
            assert "application/json" in operation["requestBody"]["content"], path


def test_placement_answers_match_their_schemas(spec, client, admin_headers):
    headers = {**admin_headers, "OpenStack-API-Version": "placement 1.39"}
    created = client.post("/placement/resource_providers", headers=headers,
                          json={"name": "rp-doc"})
    assert created.status_code == 200
    assert_matches(spec, "/placement/resource_providers", "post", created)
    uuid = created.get_json()["uuid"]
    item = f"/placement/resource_providers/{uuid}"
    inventories = client.put(f"{item}/inventories", headers=headers, json={
        "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
    assert inventories.status_code == 200
    assert_matches(spec, "/placement/resource_providers/{uuid}/inventories", "put",
                   inventories)
    consumer = "5e0b3c9a-1f2d-4e5a-8b6c-7d8e9f0a1b2c"
    written = client.put(f"/placement/allocations/{consumer}", headers=headers, json={
        "allocations": {uuid: {"resources": {"VCPU": 2}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"})
    assert written.status_code == 204
    for path, url in [
            ("/placement/", "/placement/"),
            ("/placement/resource_providers", "/placement/resource_providers"),
            ("/placement/resource_providers/{uuid}", item),
            ("/placement/resource_providers/{uuid}/inventories/{resource_class}",
             f"{item}/inventories/VCPU"),
            ("/placement/resource_providers/{uuid}/traits", f"{item}/traits"),
            ("/placement/resource_providers/{uuid}/usages", f"{item}/usages"),
            ("/placement/resource_providers/{uuid}/allocations", f"{item}/allocations"),
            ("/placement/allocations/{consumer_uuid}", f"/placement/allocations/{consumer}"),
            ("/placement/allocation_candidates",
             "/placement/allocation_candidates?resources=VCPU:1"),
            ("/placement/usages", "/placement/usages?project_id=p"),
            ("/placement/traits", "/placement/traits")]:
        response = client.get(url, headers=headers)
        assert response.status_code == 200, (url, response.get_json())
        assert_matches(spec, path, "get", response)


# -- timestamps ------------------------------------------------------------------------------

def test_group_times_carry_their_utc_offset_in_json_and_xml(client, member_headers, spec):
    created = client.post("/v2/tenant-a/groups", headers=member_headers,
                          json={"group": {"name": "db"}})
    assert created.status_code == 201
    group = created.get_json()["group"]
    assert assert_utc(group["created_at"]) <= assert_utc(group["updated_at"])
    assert_matches(spec, "/v2/{tenant_id}/groups", "post", created)
    shown = client.get(f"/v2/tenant-a/groups/{group['id']}",
                       headers={**member_headers, "Accept": "application/xml"})
    root = SafeET.fromstring(shown.data)
    assert assert_utc(root.get("created_at")) == assert_utc(group["created_at"])


@pytest.fixture
def api_services(conf, db):
    """Reservations are accepted; their flows are only recorded, never run."""
    from fleetflow.services.reservations import ReservationOps

    return {"reservations": ReservationOps(conf, db, submit=lambda *a, **options: "flow")}


def test_reservation_and_server_times_carry_their_utc_offset(client, member_headers,
                                                             sample_catalog, spec):
    accepted = client.post("/v2/tenant-a/reservations", headers=member_headers, json={
        "reservation": {"count": 1, "flavor_ref": "m1.small", "image_ref": "cirros"}})
    assert accepted.status_code == 202, accepted.get_json()
    reservation_id = accepted.get_json()["reservation"]["id"]
    shown = client.get(f"/v2/tenant-a/reservations/{reservation_id}", headers=member_headers)
    assert_utc(shown.get_json()["reservation"]["created_at"])
    assert_matches(spec, "/v2/{tenant_id}/reservations/{reservation_id}", "get", shown)
    listed = client.get("/v2/tenant-a/reservations", headers=member_headers)
    assert_utc(listed.get_json()["reservations"][0]["updated_at"])
    servers = client.get(f"/v2/tenant-a/servers?reservation_id={reservation_id}",
                         headers=member_headers)
    assert_utc(servers.get_json()["servers"][0]["created_at"])
    assert_matches(spec, "/v2/{tenant_id}/servers", "get", servers)


def test_host_times_carry_their_utc_offset(client, admin_headers, sample_catalog, spec):
    shown = client.get("/v2/admin/hosts/host-001", headers=admin_headers)
    assert_utc(shown.get_json()["host"]["created_at"])
    assert_matches(spec, "/v2/admin/hosts/{name}", "get", shown)


def test_naive_utc_rows_are_shown_as_the_same_instant():
    from fleetflow.api.fields import UtcDateTime, utc_isoformat

    naive = dt.datetime(2026, 1, 2, 3, 4, 5, 600000)
    assert utc_isoformat(naive) == "2026-01-02T03:04:05.600000+00:00"
    aware = dt.datetime(2026, 1, 2, 4, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert utc_isoformat(aware) == "2026-01-02T03:04:05+00:00"
    assert utc_isoformat(None) is None
    assert UtcDateTime().serialize("t", {"t": naive}).endswith("+00:00")


# -- what schemathesis found the document and the server disagreed on -----------------------

def test_a_flow_grace_too_large_for_a_time_span_is_400(client, admin_headers):
    response = client.get("/v2/admin/audit?flow_grace=1.4e308", headers=admin_headers)
    assert response.status_code == 400, response.get_json()
    assert "flow_grace" in response.get_json()["errors"][0]["detail"]


@pytest.mark.parametrize("dead", [0, 1, "yes", "true"])
def test_simulate_dead_takes_json_booleans_only(client, admin_headers, sample_catalog, dead):
    response = client.post("/v2/admin/hosts/host-001/simulate", headers=admin_headers,
                           json={"simulate": {"dead": dead}})
    assert response.status_code == 400, response.get_json()
    assert "simulate.dead" in response.get_json()["errors"][0]["detail"]


@pytest.mark.parametrize("method, fields", [
    ("put", {"name": "rp", "parent_provider_uuid": {}}),
    ("put", {"name": {}}),
    ("post", {"name": "rp-2", "uuid": 7}),
])
def test_a_provider_body_of_the_wrong_json_types_is_400(client, admin_headers, method, fields):
    headers = {**admin_headers, "OpenStack-API-Version": "placement 1.39"}
    created = client.post("/placement/resource_providers", headers=headers,
                          json={"name": "rp"})
    url = "/placement/resource_providers"
    if method == "put":
        url += "/" + created.get_json()["uuid"]
    response = getattr(client, method)(url, headers=headers, json=fields)
    assert response.status_code == 400, response.get_json()
