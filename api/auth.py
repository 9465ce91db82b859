"""Who is calling: ``noauth`` headers or Keystone tokens, turned into a request context.

``[api] auth_strategy`` chooses:

- ``noauth`` (development and tests): the identity is whatever the client says
  in ``X-Project-Id``, ``X-User-Id`` and ``X-Roles`` (comma separated). No
  ``X-Project-Id`` answers 401, unless ``OpenStack-System-Scope: all`` says the
  caller acts on the whole deployment (system scope: no project; the policy rules'
  scope types decide what such a caller may do). Under ``/placement`` only, OpenStack's
  ``noauth2`` convention is accepted as well, so OpenStack's own placement
  clients work unchanged: ``X-Auth-Token: admin`` is project ``admin`` with the
  ``admin`` role, ``X-Auth-Token: user:project`` is that user in that project.
  Elsewhere a token of the form ``PROJECT:ROLE[,ROLE]`` is that project with
  those roles (the convention of Nova's and Placement's ``noauth2``), so the
  stock ``openstack`` client with ``--os-auth-type admin_token --os-token
  demo:member`` works; a token without a colon is no identity there. The
  headers win over a token when both are sent. Anyone who can reach the port
  can claim any role: never expose it (see :func:`noauth_exposed`).
- ``keystone``: the WSGI app is wrapped in keystonemiddleware's ``auth_token``
  (the optional ``fleetflow[keystone]`` extra), configured from the
  ``[keystone_authtoken]`` group of the fleetflow configuration. It runs with
  ``delay_auth_decision`` so that a missing or bad token reaches us and gets a
  401 in the API's error format; the identity comes from the headers the
  middleware sets (it strips any the client sent): a project-scoped token's
  project, or a system-scoped token's ``OpenStack-System-Scope``.

Each request gets an oslo.context ``RequestContext`` in ``flask.g.context``
(:func:`current_context`): ``project_id``, ``user_id``, ``roles``,
``system_scope``, ``is_admin`` (the ``context_is_admin`` policy rule), ``request_id``.
"""

from __future__ import annotations

import dataclasses
import ipaddress

import flask
from oslo_context import context as oslo_context
from werkzeug import exceptions as wexc

from fleetflow.api import errors, policy
from fleetflow.api.state import current_state

NOAUTH = "noauth"
KEYSTONE = "keystone"

# Routes anyone may read: the API description.
PUBLIC_ENDPOINTS = frozenset({"api-docs.openapi_json", "placement.versions"})

# Paths where the OpenStack noauth2 token convention is honoured.
NOAUTH_TOKEN_PREFIXES = ("/placement",)
# The header keystonemiddleware sets for a system-scoped token (and that noauth reads).
SYSTEM_SCOPE_HEADER = "OpenStack-System-Scope"


@dataclasses.dataclass(frozen=True)
class Identity:
    project_id: str | None  # None: a system-scoped caller
    user_id: str | None
    roles: tuple[str, ...]
    system_scope: str | None = None


def _split_roles(value: str | None) -> tuple[str, ...]:
    return tuple(r.strip().lower() for r in (value or "").split(",") if r.strip())


def noauth_identity(headers, path: str) -> Identity | None:
    """The identity a noauth request claims, or None when it claims none."""
    project = (headers.get("X-Project-Id") or "").strip()
    system = (headers.get(SYSTEM_SCOPE_HEADER) or "").strip() or None
    if project:
        return Identity(project, headers.get("X-User-Id") or None,
                        _split_roles(headers.get("X-Roles")))
    token = (headers.get("X-Auth-Token") or "").strip()
    if token and path.startswith(NOAUTH_TOKEN_PREFIXES):
        # NOTE: mirrors OpenStack Placement's NoAuthMiddleware: "admin" is an
        # admin; "user:project" names both; a bare "name" is user and project;
        # a system-scoped request has no project.
        user, _sep, token_project = token.partition(":")
        roles = _split_roles(headers.get("X-Roles")) or (("admin",) if user == "admin" else ())
        if system:
            return Identity(None, user, roles, system)
        return Identity(token_project or user, user, roles)
    token_project, colon, token_roles = token.partition(":")
    if colon and token_project.strip():
        # PROJECT:ROLE[,ROLE], the convention of Nova's and Placement's noauth2.
        if system:
            return Identity(None, headers.get("X-User-Id") or None,
                            _split_roles(token_roles), system)
        return Identity(token_project.strip(), headers.get("X-User-Id") or None,
                        _split_roles(token_roles))
    if system:
        return Identity(None, headers.get("X-User-Id") or None,
                        _split_roles(headers.get("X-Roles")), system)
    return None


def keystone_identity(headers) -> Identity | None:
    """The identity keystonemiddleware validated, or None (no or bad token).

    A token is scoped to a project (``X-Project-Id``) or to the system
    (``OpenStack-System-Scope``); a token scoped to neither (a domain, or none)
    is refused, as fleetflow has no domain-scoped rules.
    """
    if headers.get("X-Identity-Status") != "Confirmed":
        return None
    project = headers.get("X-Project-Id") or None
    system = None if project else headers.get(SYSTEM_SCOPE_HEADER) or None
    if project is None and system is None:
        return None
    return Identity(project, headers.get("X-User-Id") or None,
                    _split_roles(headers.get("X-Roles")), system)


def _public(endpoint: str | None) -> bool:
    # The console's page and scripts hold no data; metrics are for the scraper.
    return endpoint in PUBLIC_ENDPOINTS or (endpoint or "").startswith(("console.", "metrics"))


def authenticate() -> None:
    """before_request hook: set ``g.context`` or answer 401."""
    if _public(flask.request.endpoint):
        return
    state = current_state()
    if state.conf.api.auth_strategy == KEYSTONE:
        identity = keystone_identity(flask.request.headers)
        missing = "A valid X-Auth-Token is required."
    else:
        identity = noauth_identity(flask.request.headers, flask.request.path)
        missing = ("No identity: send X-Project-Id (and X-User-Id, X-Roles), or "
                   "X-Auth-Token: PROJECT:ROLE[,ROLE].")
    if identity is None:
        raise wexc.Unauthorized(missing)
    ctx = oslo_context.RequestContext(
        user_id=identity.user_id, project_id=identity.project_id,
        system_scope=identity.system_scope, roles=list(identity.roles),
        request_id=errors.request_id(), overwrite=False)
    ctx.is_admin = policy.check_is_admin(state.enforcer, ctx)
    flask.g.context = ctx


def current_context() -> oslo_context.RequestContext:
    """The caller's context (set by :func:`authenticate` before every view)."""
    return flask.g.context


def keystone_middleware(wsgi_app, conf):
    """Wrap ``wsgi_app`` in keystonemiddleware's auth_token, or explain what is missing."""
    try:
        from keystonemiddleware import auth_token
    except ImportError as exc:
        raise RuntimeError(
            "[api] auth_strategy = keystone needs keystonemiddleware: "
            "pip install 'fleetflow[keystone]'") from exc
    # NOTE: oslo_config_config makes the middleware read [keystone_authtoken]
    # from fleetflow's own configuration (file and overrides) instead of
    # looking for a separate config of its own.
    return auth_token.AuthProtocol(wsgi_app, {"oslo_config_config": conf,
                                              "delay_auth_decision": True})


def noauth_exposed(conf) -> bool:
    """True when noauth is on and the API listens beyond the loopback interface.

    ``fleetflow serve`` warns in that case: anyone who reaches the port can
    claim to be admin.
    """
    if conf.api.auth_strategy != NOAUTH:
        return False
    host = conf.api.host
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True
