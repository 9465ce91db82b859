"""The harness's identity service: enough of Keystone's v3 token API for stock clients.

Nova 34 has no noauth; the harness builds each request's context from a token
``user:project`` (:mod:`fleetflow.testing.nova_harness`). This WSGI app, served
under the compute API's root at ``/identity/v3``, issues such tokens the way
Keystone issues real ones: ``POST /identity/v3/auth/tokens`` with the password
method answers 201, the token in ``X-Subject-Token``, scoped to the project the
request names. So a client configured with a password (openstacksdk's
``v3password``) can re-scope itself to another project (``connect_as_project``),
as fleetflow does to create a tenant's servers in the tenant's project.

Every project exists and user ``admin`` is an administrator in each of them; the
catalogue is empty (the clouds.yaml entry names the endpoints).
"""

from __future__ import annotations

import json

PREFIX = "/identity/v3"
USER = "admin"
PASSWORD = "harness"  # noqa: S105 - a loopback test cloud's only account
DOMAIN = {"id": "default", "name": "Default"}
#: Tokens never expire: the harness lives as long as a test run.
EXPIRES = "2099-12-31T23:59:59.000000Z"
ISSUED = "2026-01-01T00:00:00.000000Z"


def token_for(project_id: str) -> str:
    """The token Nova's harness reads as user ``admin`` in ``project_id``."""
    return f"{USER}:{project_id}"


def answer(environ) -> tuple[int, dict, dict]:
    """``(status, headers, body)`` for a request under :data:`PREFIX`."""
    route = environ.get("PATH_INFO", "")[len(PREFIX):].rstrip("/")
    method = environ["REQUEST_METHOD"]
    if route == "" and method == "GET":
        return 200, {}, {"version": {
            "id": "v3.14", "status": "stable", "updated": ISSUED,
            "links": [{"rel": "self", "href": _base(environ) + "/"}],
            "media-types": [{"base": "application/json",
                             "type": "application/vnd.openstack.identity-v3+json"}]}}
    if route == "/auth/tokens" and method == "POST":
        return _issue(_body(environ))
    if route == "/auth/tokens" and method in ("GET", "HEAD"):
        token = environ.get("HTTP_X_SUBJECT_TOKEN", "")
        user, _, project = token.partition(":")
        if user != USER or not project:
            return 404, {}, _error(404, "Could not find token.")
        return 200, {"X-Subject-Token": token}, {"token": _token(project)}
    return 404, {}, _error(404, f"no identity route {method} {route or '/'}")


def _issue(body: dict) -> tuple[int, dict, dict]:
    identity = (body.get("auth") or {}).get("identity") or {}
    password = (identity.get("password") or {}).get("user") or {}
    if "password" not in (identity.get("methods") or ()) or \
            password.get("password") != PASSWORD or \
            password.get("name", USER) != USER:
        return 401, {}, _error(401, "The request you have made requires authentication.")
    scope = ((body.get("auth") or {}).get("scope") or {}).get("project") or {}
    project = scope.get("id") or scope.get("name") or USER
    return 201, {"X-Subject-Token": token_for(project)}, {"token": _token(project)}


def _token(project: str) -> dict:
    return {"methods": ["password"], "expires_at": EXPIRES, "issued_at": ISSUED,
            "user": {"id": USER, "name": USER, "domain": DOMAIN},
            "project": {"id": project, "name": project, "domain": DOMAIN},
            "roles": [{"id": name, "name": name} for name in ("admin", "member", "reader")],
            "catalog": []}


def _error(code: int, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def _body(environ) -> dict:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        return json.loads(environ["wsgi.input"].read(length) or b"{}")
    except (ValueError, OSError):
        return {}


def _base(environ) -> str:
    host = environ.get("HTTP_HOST") or f"{environ['SERVER_NAME']}:{environ['SERVER_PORT']}"
    return f"{environ.get('wsgi.url_scheme', 'http')}://{host}{PREFIX}"
