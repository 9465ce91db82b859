"""The API's frame: error format, request ids, body limit, auth, policy, OpenAPI."""

from __future__ import annotations

import io
import json
import logging
import re
import sys

import flask
import flask_smorest
import pytest
from openapi_spec_validator import validate

from fleetflow.common import exceptions

ERROR_KEYS = {"status", "code", "title", "detail", "request_id"}
HEADER = "X-OpenStack-Request-Id"


def assert_error(response, status, code=None):
    """The response is an error of the one format, consistent with its header."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert set(body) == {"errors"} and body["errors"]
    request_id = response.headers[HEADER]
    assert request_id.startswith("req-") and len(request_id) == 40
    for error in body["errors"]:
        assert set(error) == ERROR_KEYS
        assert error["status"] == status
        assert error["request_id"] == request_id
        assert isinstance(error["title"], str) and error["title"]
        assert isinstance(error["detail"], str) and error["detail"]
        if code:
            assert error["code"] == code
    return body["errors"]


@pytest.fixture
def app_with_failures(app):
    """The app plus routes that fail on purpose (added before its first request)."""
    def conflict():
        raise exceptions.Conflict("Host host-001 is being evacuated.")

    def crash():
        raise RuntimeError("password=hunter2 in a stack frame")

    def whoami():
        ctx = flask.g.context
        return {"project_id": ctx.project_id, "user_id": ctx.user_id, "roles": ctx.roles,
                "is_admin": ctx.is_admin, "request_id": ctx.request_id}

    def aborted():
        flask_smorest.abort(409, message="Already evacuating.", code="fleetflow.busy")

    app.add_url_rule("/v2/admin/test-conflict", view_func=conflict)
    app.add_url_rule("/v2/admin/test-abort", view_func=aborted)
    app.add_url_rule("/v2/admin/test-crash", view_func=crash)
    app.add_url_rule("/v2/admin/test-whoami", view_func=whoami)
    app.add_url_rule("/placement/test-whoami", "placement_whoami", view_func=whoami)
    return app


# -- error format -------------------------------------------------------------

def test_unknown_route_is_404_in_error_format(client, admin_headers):
    assert_error(client.get("/v2/admin/no-such-thing", headers=admin_headers), 404,
                 "fleetflow.not_found")


def test_wrong_method_is_405_with_allow_header(client, admin_headers):
    response = client.delete("/v2/admin/hosts", headers=admin_headers)
    assert_error(response, 405, "fleetflow.method_not_allowed")
    assert "GET" in response.headers["Allow"]


def test_bad_host_state_is_400_naming_the_field(client, admin_headers, sample_catalog):
    response = client.put("/v2/admin/hosts/host-001", headers=admin_headers,
                          json={"host": {"state": "sleeping"}})
    (error,) = assert_error(response, 400, "fleetflow.invalid_input")
    assert "'host.state'" in error["detail"] and "maintenance" in error["detail"]


def test_each_bad_field_gets_its_own_error(client, admin_headers, sample_catalog):
    response = client.put("/v2/admin/hosts/host-001", headers=admin_headers,
                          json={"host": {"state": "up", "colour": "red", "reason": 7}})
    details = sorted(e["detail"] for e in assert_error(response, 400))
    assert len(details) == 2
    assert "'host.colour'" in details[0] and "Unknown field" in details[0]
    assert "'host.reason'" in details[1]


@pytest.mark.parametrize("body, expected", [
    ({}, "'host'"),
    ({"host": {}}, "'host.state'"),
    ([1, 2], "Invalid input type"),
])
def test_malformed_bodies_are_400(client, admin_headers, sample_catalog, body, expected):
    response = client.put("/v2/admin/hosts/host-001", headers=admin_headers, json=body)
    assert any(expected in e["detail"] for e in assert_error(response, 400))


def test_invalid_json_is_400(client, admin_headers, sample_catalog):
    response = client.put("/v2/admin/hosts/host-001", data="{not json",
                          headers={**admin_headers, "Content-Type": "application/json"})
    assert_error(response, 400, "fleetflow.invalid_input")


def test_bad_query_parameter_is_400_naming_it(client, admin_headers):
    response = client.get("/v2/admin/hosts?limit=0", headers=admin_headers)
    (error,) = assert_error(response, 400)
    assert "query parameter field 'limit'" in error["detail"]


def test_fleetflow_error_keeps_its_status_and_code(app_with_failures, admin_headers):
    response = app_with_failures.test_client().get("/v2/admin/test-conflict",
                                                   headers=admin_headers)
    (error,) = assert_error(response, 409, "fleetflow.conflict")
    assert error["detail"] == "Host host-001 is being evacuated."


def test_abort_with_a_code_keeps_it(app_with_failures, admin_headers):
    response = app_with_failures.test_client().get("/v2/admin/test-abort",
                                                   headers=admin_headers)
    (error,) = assert_error(response, 409, "fleetflow.busy")
    assert error["detail"] == "Already evacuating." and error["title"] == "Conflict"


def test_unexpected_exception_is_500_without_leaking(app_with_failures, admin_headers,
                                                     caplog):
    with caplog.at_level(logging.ERROR, logger="fleetflow.api.errors"):
        response = app_with_failures.test_client().get("/v2/admin/test-crash",
                                                       headers=admin_headers)
    (error,) = assert_error(response, 500, "fleetflow.internal_error")
    assert "hunter2" not in response.get_data(as_text=True)
    assert "Traceback" not in response.get_data(as_text=True)
    assert error["request_id"] in error["detail"]
    # The operator finds the traceback in the log under the same request id.
    logged = [r for r in caplog.records if error["request_id"] in r.getMessage()]
    assert logged and logged[0].exc_info and "hunter2" in str(logged[0].exc_info[1])


def test_every_response_has_a_fresh_request_id(client, admin_headers):
    first = client.get("/v2/admin/hosts", headers=admin_headers)
    second = client.get("/v2/admin/hosts", headers=admin_headers)
    assert first.status_code == second.status_code == 200
    ids = {first.headers[HEADER], second.headers[HEADER]}
    assert len(ids) == 2 and all(i.startswith("req-") for i in ids)
    assert client.get("/openapi.json").headers[HEADER].startswith("req-")


def test_request_context_carries_identity_and_request_id(app_with_failures, make_headers):
    response = app_with_failures.test_client().get(
        "/v2/admin/test-whoami", headers=make_headers("p1", "Reader", " member ", user="u1"))
    body = response.get_json()
    assert body["project_id"] == "p1" and body["user_id"] == "u1"
    assert sorted(body["roles"]) == ["member", "reader"] and body["is_admin"] is False
    assert body["request_id"] == response.headers[HEADER]


# -- body limit ----------------------------------------------------------------

def test_body_over_limit_is_413(client, admin_headers, sample_catalog):
    big = {"host": {"state": "up", "reason": "x" * (120 * 1024)}}
    response = client.put("/v2/admin/hosts/host-001", headers=admin_headers, json=big)
    assert_error(response, 413, "fleetflow.request_too_large")


def test_body_over_limit_is_413_even_where_the_body_is_not_read(client, admin_headers):
    response = client.get("/v2/admin/hosts", headers=admin_headers,
                          data=b"x" * (113 * 1024))
    assert_error(response, 413)


def test_body_at_limit_is_accepted(client, admin_headers, sample_catalog, conf):
    # A valid body padded with spaces to exactly the limit.
    body = json.dumps({"host": {"state": "up"}}).encode()
    body += b" " * (conf.api.max_body_bytes - len(body))
    response = client.put("/v2/admin/hosts/host-001", data=body,
                          headers={**admin_headers, "Content-Type": "application/json"})
    assert response.status_code == 200, response.get_json()


def _chunked(client, path, headers, payload: bytes):
    # No Content-Length; the server says it dechunked the body (as werkzeug's,
    # gunicorn and waitress do).
    return client.put(path, input_stream=io.BytesIO(payload),
                      headers={**headers, "Content-Type": "application/json",
                               "Transfer-Encoding": "chunked"},
                      environ_overrides={"wsgi.input_terminated": True})


def test_chunked_body_over_limit_is_413(client, admin_headers, sample_catalog):
    payload = json.dumps({"host": {"state": "up", "reason": "x" * (200 * 1024)}}).encode()
    response = _chunked(client, "/v2/admin/hosts/host-001", admin_headers, payload)
    assert_error(response, 413)


def test_chunked_body_under_limit_is_served(client, admin_headers, sample_catalog):
    payload = json.dumps({"host": {"state": "down", "reason": "chunked"}}).encode()
    response = _chunked(client, "/v2/admin/hosts/host-001", admin_headers, payload)
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["host"]["state"] == "down"


# -- authentication --------------------------------------------------------------

@pytest.mark.parametrize("path", ["/v2/admin/hosts", "/v2/tenant-a/flavors",
                                  "/v2/tenant-a/images/cirros", "/v2/admin/nowhere"])
def test_no_identity_is_401(client, path):
    assert_error(client.get(path, headers={"X-Roles": "admin", "X-User-Id": "u"}), 401,
                 "fleetflow.unauthorized")


def test_openapi_needs_no_identity(client):
    assert client.get("/openapi.json").status_code == 200


def test_noauth_token_convention_only_under_placement(app_with_failures):
    client = app_with_failures.test_client()
    response = client.get("/placement/test-whoami", headers={"X-Auth-Token": "admin"})
    assert response.status_code == 200
    body = response.get_json()
    assert body["roles"] == ["admin"] and body["is_admin"] and body["project_id"] == "admin"
    other = client.get("/placement/test-whoami", headers={"X-Auth-Token": "alice:proj"})
    assert other.get_json()["project_id"] == "proj" and other.get_json()["is_admin"] is False
    # Elsewhere a token is not an identity in noauth mode.
    assert_error(client.get("/v2/admin/test-whoami", headers={"X-Auth-Token": "admin"}), 401)


def test_keystone_strategy_without_token_is_401(db, tmp_path):
    pytest.importorskip("keystonemiddleware")
    from fleetflow.api.app import create_app
    from fleetflow.common import config

    # As a deployment would: the middleware's options in fleetflow's config file.
    # Going further (a real token) would need a Keystone server.
    conf_file = tmp_path / "fleetflow.conf"
    conf_file.write_text("[api]\nauth_strategy = keystone\n"
                         "[keystone_authtoken]\n"
                         "www_authenticate_uri = http://keystone.invalid:5000/v3\n")
    conf = config.load(config_files=[str(conf_file)], environ={})
    conf.set_override("policy_file", str(tmp_path / "policy.yaml"), group="api")
    app = create_app(conf, database=db)
    client = app.test_client()
    # Headers that would be an admin under noauth are stripped by auth_token.
    spoofed = {"X-Project-Id": "admin", "X-Roles": "admin", "X-Identity-Status": "Confirmed"}
    response = client.get("/v2/admin/hosts", headers=spoofed)
    assert_error(response, 401, "fleetflow.unauthorized")
    assert "X-Auth-Token" in response.get_json()["errors"][0]["detail"]
    # auth_token tells the client where to get a token.
    assert "keystone.invalid" in response.headers["WWW-Authenticate"]
    spec = client.get("/openapi.json").get_json()
    assert "keystone" in spec["components"]["securitySchemes"]


def test_keystone_strategy_without_keystonemiddleware_says_what_to_install(
        make_conf, db, monkeypatch):
    from fleetflow.api.app import create_app

    # None in sys.modules makes the import fail as if the package were absent.
    monkeypatch.setitem(sys.modules, "keystonemiddleware", None)
    with pytest.raises(RuntimeError, match=r"fleetflow\[keystone\]"):
        create_app(make_conf(api={"auth_strategy": "keystone"}), database=db)


@pytest.mark.parametrize("host, exposed", [("127.0.0.1", False), ("::1", False),
                                           ("localhost", False), ("0.0.0.0", True),
                                           ("10.1.2.3", True)])
def test_noauth_exposed_beyond_loopback(make_conf, host, exposed):
    from fleetflow.api.auth import noauth_exposed

    assert noauth_exposed(make_conf(api={"host": host})) is exposed
    assert noauth_exposed(make_conf(api={"host": host, "auth_strategy": "keystone"})) is False


# -- policy ------------------------------------------------------------------------

@pytest.mark.parametrize("method, path", [("get", "/v2/admin/hosts"),
                                          ("get", "/v2/admin/hosts/host-001"),
                                          ("put", "/v2/admin/hosts/host-001")])
def test_member_on_admin_route_is_403(client, member_headers, sample_catalog, method, path):
    response = getattr(client, method)(path, headers=member_headers,
                                       json={"host": {"state": "down"}})
    (error,) = assert_error(response, 403, "fleetflow.forbidden")
    assert "hosts:" in error["detail"]


def test_forbidden_caller_learns_nothing_from_validation(client, member_headers):
    response = client.put("/v2/admin/hosts/host-001", headers=member_headers,
                          json={"host": {"state": "bogus"}})
    assert_error(response, 403)


def test_another_tenants_path_is_403(client, make_headers):
    response = client.get("/v2/tenant-b/flavors", headers=make_headers("tenant-a", "member"))
    (error,) = assert_error(response, 403)
    assert "tenant-b" in error["detail"]


def test_admin_may_use_any_tenants_path(client, admin_headers):
    assert client.get("/v2/tenant-b/flavors", headers=admin_headers).status_code == 200


def test_caller_without_roles_is_403_in_own_project(client, make_headers):
    assert_error(client.get("/v2/tenant-a/flavors", headers=make_headers("tenant-a")), 403)


def test_policy_file_overrides_a_default(make_conf, db, sample_catalog, reader_headers):
    from fleetflow.api.app import create_app

    conf = make_conf()
    client = create_app(conf, database=db).test_client()
    assert_error(client.get("/v2/admin/hosts", headers=reader_headers), 403)
    # Written while the app runs: oslo.policy picks the file up on the next check.
    with open(conf.api.policy_file, "w") as f:
        f.write('"hosts:list": "rule:project_reader or rule:admin"\n')
    listed = client.get("/v2/admin/hosts", headers=reader_headers)
    assert listed.status_code == 200 and len(listed.get_json()["hosts"]) == 3
    # Rules the file does not name keep their defaults.
    assert_error(client.get("/v2/admin/hosts/host-001", headers=reader_headers), 403)
    # And an app started with the file in place applies it from the first request.
    fresh = create_app(conf, database=db).test_client()
    assert fresh.get("/v2/admin/hosts", headers=reader_headers).status_code == 200


def test_policy_files_are_looked_at_once_per_request(client, admin_headers, sample_catalog,
                                                     monkeypatch):
    from oslo_policy import policy as oslo_policy

    looks = []
    original = oslo_policy.Enforcer.load_rules

    def counting(self, force_reload=False):
        looks.append(force_reload)
        return original(self, force_reload)

    monkeypatch.setattr(oslo_policy.Enforcer, "load_rules", counting)
    # Two checks each: context_is_admin when authenticating, then the route's rule.
    assert client.get("/v2/admin/hosts", headers=admin_headers).status_code == 200
    assert looks == [False]
    assert client.get("/v2/admin/hosts", headers=admin_headers).status_code == 200
    assert looks == [False, False]


def test_malformed_policy_file_fails_at_start(make_conf, db):
    from fleetflow.api.app import create_app

    conf = make_conf()
    with open(conf.api.policy_file, "w") as f:
        f.write("hosts:list: [unclosed\n")
    with pytest.raises(ValueError, match="Policy file .*policy.yaml is malformed"):
        create_app(conf, database=db)


def test_every_v2_route_names_a_registered_policy_rule(app):
    from fleetflow.api import policy

    registered = {rule.name for rule in policy.list_rules()}
    checked = 0
    for url_rule in app.url_map.iter_rules():
        if not url_rule.rule.startswith("/v2/"):
            continue
        view = app.view_functions[url_rule.endpoint]
        view_class = getattr(view, "view_class", None)
        for method in url_rule.methods - {"HEAD", "OPTIONS"}:
            handler = getattr(view_class, method.lower()) if view_class else view
            rule = getattr(handler, "policy_rule", None)
            assert rule in registered, f"{method} {url_rule.rule} has no policy rule"
            checked += 1
    assert checked >= 6


# -- OpenAPI -------------------------------------------------------------------------

def test_openapi_document_is_valid_and_lists_every_route(app, client):
    spec = client.get("/openapi.json").get_json()
    validate(spec)
    assert spec["openapi"].startswith("3.0") and spec["info"]["title"] == "fleetflow"
    from fleetflow.api.app import NOT_API

    for url_rule in app.url_map.iter_rules():
        if url_rule.endpoint.startswith(("api-docs.", *NOT_API)):
            continue
        # A converter (``<path:name>``, ``<string(length=15):id>``) is documented as
        # the bare parameter.
        path = re.sub(r"<(?:\w+(?:\([^)]*\))?:)?(\w+)>", r"{\1}", url_rule.rule)
        assert path in spec["paths"], f"{path} is not documented"
        for method in url_rule.methods - {"HEAD", "OPTIONS"}:
            assert method.lower() in spec["paths"][path], f"{method} {path} not documented"
    schemas = spec["components"]["schemas"]
    assert {"Host", "HostUpdate", "Flavor", "Image", "Errors"} <= set(schemas)
    put = spec["paths"]["/v2/admin/hosts/{name}"]["put"]
    assert "400" in put["responses"] and "422" not in put["responses"]
