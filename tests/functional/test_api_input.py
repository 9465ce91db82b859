"""Hostile and sloppy input: a 4xx naming what is wrong, never a 500, nothing written."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from defusedxml import ElementTree as SafeET

TENANT_URL = "/v2/tenant-a"
RESERVATIONS = f"{TENANT_URL}/reservations"
GROUPS = f"{TENANT_URL}/groups"
VCLUSTERS = f"{TENANT_URL}/vclusters"
QUOTA = "/v2/admin/quotas/tenant-a"
JSON_TYPE = {"Content-Type": "application/json"}
XML_TYPE = {"Content-Type": "application/xml"}


def row_counts(db) -> dict:
    """Rows of every table of the database: what "nothing written" is checked against."""
    with db.engine.connect() as connection:
        tables = sa.inspect(connection).get_table_names()
        return {table: connection.scalar(sa.text(f'SELECT count(*) FROM "{table}"'))
                for table in tables}


def details(response) -> str:
    return " ".join(error["detail"] for error in response.json["errors"])


def reservation(**fields) -> dict:
    return {"reservation": {"count": 1, "flavor_ref": "m1.small", "image_ref": "cirros",
                            **fields}}


@pytest.fixture
def send(client, db):
    """``send(method, url, raw_body, headers)``: the response, checked to be a 400 in the
    error format that wrote no row."""
    def _send(method, url, body, headers, status=400):
        before = row_counts(db)
        response = client.open(url, method=method, data=body, headers=headers)
        assert response.status_code == status, response.data[:500]
        errors = response.json["errors"]
        assert errors and {"status", "code", "title", "detail", "request_id"} <= set(errors[0])
        assert row_counts(db) == before
        return response

    return _send


# -- the five 500s ------------------------------------------------------------------


@pytest.mark.parametrize("url,template", [
    (RESERVATIONS, '{"reservation": {"count": %s, "flavor_ref": "m1.small", '
                   '"image_ref": "cirros"}}'),
    (GROUPS, '{"group": {"name": "g", "max_per_host": %s}}'),
])
def test_an_integer_literal_of_5000_digits_is_a_400(send, member_headers, url, template):
    response = send("POST", url, template % ("9" * 5000), {**member_headers, **JSON_TYPE})
    assert "5000 digits" in details(response)


@pytest.mark.parametrize("url", [RESERVATIONS, GROUPS, VCLUSTERS])
def test_json_nested_1000_deep_is_a_400(send, member_headers, url):
    body = '{"a": ' * 1000 + "1" + "}" * 1000
    response = send("POST", url, body, {**member_headers, **JSON_TYPE})
    assert "nested deeper than" in details(response)


def test_json_nested_1000_deep_is_a_400_on_placement(send, admin_headers):
    body = "[" * 1000 + "]" * 1000
    send("POST", "/placement/resource_providers", body, {**admin_headers, **JSON_TYPE})


@pytest.mark.parametrize("url,root", [(GROUPS, "group"), (VCLUSTERS, "vcluster")])
def test_xml_nested_1000_deep_is_a_400(send, member_headers, url, root):
    body = f"<{root}>" + "<a>" * 1000 + "</a>" * 1000 + f"</{root}>"
    response = send("POST", url, body,
                    {**member_headers, **XML_TYPE, "Accept": "application/json"})
    assert "nested deeper than" in details(response)


@pytest.mark.parametrize("url,body,field", [
    (RESERVATIONS, reservation(name="\udc80"), "reservation.name"),
    (RESERVATIONS, reservation(flavor_ref="m1\udc80"), "reservation.flavor_ref"),
    (GROUPS, {"group": {"name": "\udc80"}}, "group.name"),
    (GROUPS, {"group": {"name": "g", "metadata": {"k": "\udc80"}}}, "group.metadata.k"),
    (GROUPS, {"group": {"name": "g", "metadata": {"\udc80": "v"}}}, "group.metadata"),
    (RESERVATIONS, reservation(capabilities={"\udc80": "x"}), "reservation.capabilities"),
])
def test_a_lone_surrogate_anywhere_is_a_400_naming_the_field(send, member_headers, url,
                                                             body, field):
    # json.dumps writes the surrogate as the escape "\udc80", as a client would.
    response = send("POST", url, json.dumps(body), {**member_headers, **JSON_TYPE})
    assert f"'{field}'" in details(response) and "surrogate" in details(response)


def test_nul_is_refused_in_any_string(send, member_headers):
    body = json.dumps({"group": {"name": "g", "metadata": {"k": "a\u0000b"}}})
    assert "NUL" in details(send("POST", GROUPS, body, {**member_headers, **JSON_TYPE}))


@pytest.mark.parametrize("url,method,body,field", [
    (GROUPS, "POST", {"group": {"name": "g", "max_per_host": 2**63}}, "group.max_per_host"),
    (RESERVATIONS, "POST", reservation(count=2**63), "reservation.count"),
    (RESERVATIONS, "POST", reservation(volume_gb=2**31), "reservation.volume_gb"),
    (QUOTA, "PUT", {"quota": {"ram_mb": 2**63}}, "quota.ram_mb"),
    (QUOTA, "PUT", {"quota": {"instances": -(2**63)}}, "quota.instances"),
])
def test_an_integer_beyond_the_columns_is_a_400(send, member_headers, admin_headers, url,
                                                method, body, field):
    headers = admin_headers if url == QUOTA else member_headers
    response = send(method, url, json.dumps(body), {**headers, **JSON_TYPE})
    assert f"'{field}'" in details(response)


def test_the_largest_column_integer_is_accepted(client, admin_headers):
    response = client.put(QUOTA, json={"quota": {"ram_mb": 2**31 - 1}}, headers=admin_headers)
    assert response.status_code == 200, response.json
    assert response.json["quota"]["ram_mb"] == 2**31 - 1


# -- numbers are numbers ------------------------------------------------------------


@pytest.mark.parametrize("value", ["2", 1.5, 2.0, True, None, [2], {"n": 2}])
def test_count_must_be_a_json_integer(send, member_headers, value):
    response = send("POST", RESERVATIONS, json.dumps(reservation(count=value)),
                    {**member_headers, **JSON_TYPE})
    assert "'reservation.count'" in details(response)


@pytest.mark.parametrize("value", ["2", 1.9])
def test_quota_must_be_a_json_integer(send, admin_headers, value):
    response = send("PUT", QUOTA, json.dumps({"quota": {"instances": value}}),
                    {**admin_headers, **JSON_TYPE})
    assert "'quota.instances'" in details(response)


@pytest.mark.parametrize("value", ["2", 1.5])
def test_group_max_per_host_must_be_a_json_integer(send, member_headers, value):
    body = json.dumps({"group": {"name": "g", "max_per_host": value}})
    response = send("POST", GROUPS, body, {**member_headers, **JSON_TYPE})
    assert "'group.max_per_host'" in details(response)


def test_an_xml_integer_is_read_from_its_digits(client, member_headers):
    response = client.post(GROUPS, data='<group name="g" max_per_host="2"/>',
                           headers={**member_headers, **XML_TYPE, "Accept": "application/json"})
    assert response.status_code == 201, response.data
    assert response.json["group"]["max_per_host"] == 2


@pytest.mark.parametrize("value", ["1.5", "two", "99999999999999999999"])
def test_an_xml_integer_that_is_not_digits_or_too_large_is_a_400(client, member_headers,
                                                                 value):
    response = client.post(GROUPS, data=f'<group name="g" max_per_host="{value}"/>',
                           headers={**member_headers, **XML_TYPE, "Accept": "application/json"})
    assert response.status_code == 400, response.data
    assert "'group.max_per_host'" in details(response)


# -- media types --------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded",
                                          "text/plain"])
def test_a_json_body_without_its_content_type_is_a_415_saying_what_to_send(
        send, admin_headers, content_type):
    headers = dict(admin_headers, **({"Content-Type": content_type} if content_type else {}))
    response = send("PUT", QUOTA, json.dumps({"quota": {"instances": 3}}), headers,
                    status=415)
    assert "application/json" in details(response)
    assert "application/xml" not in details(response)


def test_a_groups_body_of_another_type_is_a_415_naming_json_and_xml(send, member_headers):
    response = send("POST", GROUPS, '{"group": {"name": "g"}}',
                    {**member_headers, "Content-Type": "text/plain"}, status=415)
    assert "application/json or application/xml" in details(response)


@pytest.mark.parametrize("content_type", ["application/foo+json", "application/vnd.api+json",
                                          "text/json"])
def test_a_type_that_only_ends_in_json_is_a_415(send, admin_headers, member_headers,
                                                content_type):
    response = send("PUT", QUOTA, json.dumps({"quota": {"instances": 3}}),
                    {**admin_headers, "Content-Type": content_type}, status=415)
    assert content_type in details(response) and "application/json" in details(response)
    send("POST", GROUPS, json.dumps({"group": {"name": "g"}}),
         {**member_headers, "Content-Type": content_type}, status=415)


def test_placement_reads_only_application_json_too(send, admin_headers):
    headers = {**admin_headers, "OpenStack-API-Version": "placement latest",
               "Content-Type": "application/foo+json"}
    response = send("POST", "/placement/resource_providers", json.dumps({"name": "rp"}),
                    headers, status=415)
    assert "application/foo+json" in details(response)


def test_no_body_and_no_type_still_says_what_is_missing(send, admin_headers):
    response = send("PUT", QUOTA, "", admin_headers)
    assert "'quota'" in details(response)


# -- query parameters ---------------------------------------------------------------


@pytest.mark.parametrize("url", [f"{GROUPS}?bogus=1", f"{RESERVATIONS}?limit=2&bogus=1",
                                 f"{TENANT_URL}/servers?colour=red",
                                 "/v2/admin/hosts?bogus=1"])
def test_an_unknown_query_parameter_on_a_list_is_a_400_naming_it(client, admin_headers, url):
    response = client.get(url.replace("tenant-a", "admin"), headers=admin_headers)
    assert response.status_code == 400, response.json
    assert "bogus" in details(response) or "colour" in details(response)


def test_a_route_without_query_parameters_refuses_any(client, member_headers):
    response = client.post(f"{GROUPS}?force=1", json={"group": {"name": "g"}},
                           headers=member_headers)
    assert response.status_code == 400
    assert "'force'" in details(response)
    response = client.get(f"{GROUPS}/no-such-group?verbose=1", headers=member_headers)
    assert response.status_code == 400
    assert "'verbose'" in details(response)


def test_head_takes_the_query_parameters_of_get(client, member_headers):
    assert client.head(f"{GROUPS}?limit=1", headers=member_headers).status_code == 200
    assert client.head(f"{GROUPS}?bogus=1", headers=member_headers).status_code == 400


def test_documented_query_parameters_still_work(client, admin_headers, member_headers,
                                                sample_catalog):
    # dry_run on POST .../reservations: tests/functional/test_api_reservations.py.
    for url, headers in [(f"{GROUPS}?limit=1&name=x", member_headers),
                         (f"{RESERVATIONS}?limit=5&status=ACTIVE", member_headers),
                         ("/v2/admin/hosts?limit=2&marker=host-001&region=europe",
                          admin_headers),
                         (f"{TENANT_URL}/flavors?limit=1", member_headers)]:
        response = client.get(url, headers=headers)
        assert response.status_code == 200, (url, response.json)


@pytest.mark.parametrize("path", ["reservations", "servers", "groups", "volumes", "flavors",
                                  "images", "flows"])
def test_an_unknown_marker_is_a_400_naming_it_on_every_project_list(
        flow_engine, client, member_headers, sample_catalog, path):
    response = client.get(f"{TENANT_URL}/{path}?marker=no-such-item", headers=member_headers)
    assert response.status_code == 400, response.json
    assert "'marker'" in details(response) and "no-such-item" in details(response)


@pytest.mark.parametrize("path", ["hosts", "flows", "servers"])
def test_an_unknown_marker_is_a_400_naming_it_on_every_admin_list(
        flow_engine, client, admin_headers, sample_catalog, path):
    response = client.get(f"/v2/admin/{path}?marker=no-such-item", headers=admin_headers)
    assert response.status_code == 400, response.json
    assert "'marker'" in details(response)


# -- names, and XML that always parses -------------------------------------------------


@pytest.mark.parametrize("body,field", [
    ({"group": {"name": "a\x01b"}}, "group.name"),
    ({"group": {"name": "a\nb"}}, "group.name"),
    ({"group": {"name": "g", "metadata": {"k\x7f": "v"}}}, "group.metadata"),
    ({"group": {"name": "g", "capabilities": {"k\x1b": "v"}}}, "group.capabilities"),
])
def test_control_characters_in_names_and_keys_are_refused(send, member_headers, body, field):
    response = send("POST", GROUPS, json.dumps(body), {**member_headers, **JSON_TYPE})
    assert f"'{field}" in details(response) and "control characters" in details(response)


def test_free_text_values_may_still_hold_newlines(client, member_headers):
    response = client.post(GROUPS, json={"group": {"name": "g", "metadata": {"note": "a\nb"}}},
                           headers=member_headers)
    assert response.status_code == 201, response.json


@pytest.mark.parametrize("document,entry", [
    (b'<group name="g"><metadata><meta key="k"><a/></meta></metadata></group>', "<a>"),
    (b'<group name="g"><metadata><meta key="k">v<b>w</b></meta></metadata></group>', "<b>"),
    (b'<group name="g"><capabilities><capability key="gpu">true<x/></capability>'
     b'</capabilities></group>', "<x>"),
])
def test_an_element_inside_a_keyed_xml_entry_is_a_400_naming_it(send, member_headers,
                                                                 document, entry):
    response = send("POST", GROUPS, document,
                    {**member_headers, **XML_TYPE, "Accept": "application/json"})
    assert entry in details(response) and "key=" in details(response)


def test_groups_xml_is_well_formed_whatever_the_stored_names_hold(client, db, member_headers):
    from fleetflow.persistence import groups as group_rows

    # A row from before names were checked (or written by another path).
    with db.session() as session:
        group_rows.create(session, "tenant-a", "bad\x01name\x0b", [])
    response = client.get(GROUPS, headers={**member_headers, "Accept": "application/xml"})
    assert response.status_code == 200
    root = SafeET.fromstring(response.data)
    assert root.find("group").get("name") == "bad\ufffdname\ufffd"


# -- every body schema uses the shared field types ---------------------------------------


def _body_schemas(app):
    """(route, schema) of every body argument of every /v2 route."""
    for rule in app.url_map.iter_rules():
        view_class = getattr(app.view_functions[rule.endpoint], "view_class", None)
        if view_class is None or not rule.rule.startswith("/v2/"):
            continue
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            apidoc = getattr(getattr(view_class, method.lower(), None), "_apidoc", {})
            for parameter in (apidoc.get("arguments") or {}).get("parameters", []):
                if parameter.get("in") not in ("query", "path"):
                    yield f"{method} {rule.rule}", parameter["schema"]


def _fields(schema, kind, dict_part: str, path=""):
    """``(where, field)`` of every ``kind`` field of ``schema``, nested ones too;
    of a Dict, its ``dict_part`` (``key_field`` or ``value_field``)."""
    import marshmallow as ma

    schema = schema() if isinstance(schema, type) else schema
    pending = [(path + "." + name, field) for name, field in schema.fields.items()]
    while pending:
        where, field = pending.pop()
        if isinstance(field, kind):
            yield where, field
        elif isinstance(field, ma.fields.Nested):
            pending.extend((where + "." + name, inner)
                           for name, inner in field.schema.fields.items())
        elif isinstance(field, ma.fields.List):
            pending.append((where + "[]", field.inner))
        elif isinstance(field, ma.fields.Dict) and getattr(field, dict_part) is not None:
            pending.append((where + "{" + dict_part[:-6] + "}", getattr(field, dict_part)))


def _integer_fields(schema):
    import marshmallow as ma

    return _fields(schema, ma.fields.Integer, "value_field")


def test_every_integer_of_every_v2_body_is_the_strict_bounded_kind(app):
    from fleetflow.api import fields

    found = [(route, where) for route, schema in _body_schemas(app)
             for where, field in _integer_fields(schema)]
    assert found, "no integer fields found: the walk is broken"
    loose = [(route, where) for route, schema in _body_schemas(app)
             for where, field in _integer_fields(schema)
             if not isinstance(field, fields.Integer)]
    assert loose == [], "\n".join(map(str, loose))


def test_a_placement_inventory_that_is_not_an_object_is_a_400(send, client, admin_headers):
    headers = {**admin_headers, "OpenStack-API-Version": "placement latest"}
    provider = client.post("/placement/resource_providers", json={"name": "rp"},
                           headers=headers).json["uuid"]
    body = json.dumps({"resource_provider_generation": 0, "inventories": {"VCPU": 1.5}})
    response = send("PUT", f"/placement/resource_providers/{provider}/inventories", body,
                    {**headers, **JSON_TYPE})
    # Placement's own wording: the schema names the value and where it stands.
    assert "is not of type 'object'" in details(response)
    assert "inventories" in details(response) and "VCPU" in details(response)


def test_placement_names_what_is_wrong_in_its_json(send, admin_headers):
    headers = {**admin_headers, "OpenStack-API-Version": "placement latest", **JSON_TYPE}
    response = send("POST", "/placement/resource_providers", '{"name": "a\\udc80"}', headers)
    assert "'name'" in details(response) and "surrogate" in details(response)


def _string_fields(schema):
    import marshmallow as ma

    return _fields(schema, ma.fields.String, "key_field")


def test_every_string_of_every_v2_body_refuses_control_characters(app):
    """Names and free text alike; a word out of a fixed list cannot hold one anyway."""
    import marshmallow as ma

    from fleetflow.api import fields

    found = [(route, where) for route, schema in _body_schemas(app)
             for where, field in _string_fields(schema)]
    assert found, "no string fields found: the walk is broken"
    loose = [(route, where) for route, schema in _body_schemas(app)
             for where, field in _string_fields(schema)
             if fields.no_control_characters not in field.validators
             and not any(isinstance(v, ma.validate.OneOf) for v in field.validators)]
    assert loose == [], "\n".join(map(str, loose))
