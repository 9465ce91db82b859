"""The harness's identity service: Keystone's token answer, scoped to any project."""

from __future__ import annotations

import io
import json

from fleetflow.testing import harness_identity as identity


def request(method, path, body=None, **headers):
    payload = json.dumps(body).encode() if body is not None else b""
    environ = {"REQUEST_METHOD": method, "PATH_INFO": identity.PREFIX + path,
               "CONTENT_LENGTH": str(len(payload)), "wsgi.input": io.BytesIO(payload),
               "HTTP_HOST": "127.0.0.1:5000", "wsgi.url_scheme": "http"}
    environ.update({f"HTTP_{k.upper()}": v for k, v in headers.items()})
    return identity.answer(environ)


def password_body(password=identity.PASSWORD, scope=None):
    auth = {"identity": {"methods": ["password"], "password": {"user": {
        "name": identity.USER, "domain": {"id": "default"}, "password": password}}}}
    if scope is not None:
        auth["scope"] = {"project": scope}
    return {"auth": auth}


def test_a_password_scoped_to_a_project_gets_that_projects_token():
    status, headers, body = request("POST", "/auth/tokens", password_body(scope={"id": "demo"}))
    assert status == 201
    assert headers["X-Subject-Token"] == "admin:demo"
    assert body["token"]["project"]["id"] == "demo"
    assert "admin" in {role["name"] for role in body["token"]["roles"]}


def test_without_a_scope_the_token_is_the_admin_projects():
    status, headers, _ = request("POST", "/auth/tokens", password_body())
    assert (status, headers["X-Subject-Token"]) == (201, "admin:admin")


def test_a_wrong_password_is_401_and_no_token():
    status, headers, body = request("POST", "/auth/tokens", password_body("wrong"))
    assert status == 401 and "X-Subject-Token" not in headers
    assert body["error"]["code"] == 401


def test_the_version_document_names_itself_and_a_token_validates():
    status, _, body = request("GET", "")
    assert status == 200 and body["version"]["links"][0]["href"].endswith("/identity/v3/")
    status, headers, body = request("GET", "/auth/tokens", x_subject_token="admin:demo")
    assert status == 200 and body["token"]["project"]["id"] == "demo"
    assert request("GET", "/auth/tokens", x_subject_token="nobody")[0] == 404
