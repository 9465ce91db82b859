"""The Flask application factory of the fleetflow REST API.

``create_app(conf)`` builds one app: flask-smorest ``Api`` (OpenAPI 3.0 at
``/openapi.json``, generated from the marshmallow schemas), the error format
of :mod:`fleetflow.api.errors`, the body-size limit, authentication
(:mod:`fleetflow.api.auth`), policy (:mod:`fleetflow.api.policy`) and the
resource blueprints listed in :data:`BLUEPRINTS`.

Adding a resource
-----------------
1. ``api/<resource>/schemas.py``: marshmallow schemas (``ThingSchema``,
   ``ThingCreateSchema``, ``ThingQueryArgsSchema`` inheriting
   ``common.PaginationArgsSchema`` for lists).
2. ``api/<resource>/routes.py``: ``blp = common.Blueprint("things", __name__,
   url_prefix="/v2/<tenant_id>/things", description=...)`` and one
   ``MethodView`` for the collection and one for the item; every method
   decorated ``@policy.authorize("things:list")`` (top-most) and the rule
   added to ``policy.ROUTE_RULES``. Read and write rows through a service
   (``services/<resource>.py``; api/ imports no persistence or engine
   module), given the database or the registered services of
   ``state.current_state()``; reach the caller through
   ``auth.current_context()``; fail with ``flask_smorest.abort(status,
   message=...)`` or a ``FleetflowError``.
3. One line in :data:`BLUEPRINTS` below. tests/functional/conftest.py gives
   ``app``/``client`` fixtures and headers for admin, member and reader.
"""

from __future__ import annotations

import importlib
import logging
import threading

import flask
import flask_smorest
from oslo_middleware import cors
from werkzeug import exceptions as wexc
from werkzeug import routing

from fleetflow.api import auth, bodies, errors, openapi, policy, request_metrics
from fleetflow.api.console import blp as console_blp
from fleetflow.api.state import EXTENSION_KEY, AppState
from fleetflow.common.config import openstack_mode

LOG = logging.getLogger(__name__)

API_VERSION = "2.0"

# Modules that define ``blp``, registered in this order. One line per resource.
BLUEPRINTS = [
    "fleetflow.api.hosts.routes",
    "fleetflow.api.evacuations.routes",
    "fleetflow.api.recoveries.routes",
    "fleetflow.api.flavors.routes",
    "fleetflow.api.images.routes",
    "fleetflow.api.reservations.routes",
    "fleetflow.api.servers.routes",
    "fleetflow.api.groups.routes",
    "fleetflow.api.vclusters.routes",
    "fleetflow.api.volumes.routes",
    "fleetflow.api.quotas.routes",
    "fleetflow.api.placement.routes",
    "fleetflow.api.audit.routes",
    "fleetflow.api.capacity.routes",
    "fleetflow.api.events.routes",
    "fleetflow.api.flows.routes",
    "fleetflow.api.queue.routes",
    "fleetflow.api.permissions.routes",
]

#: Endpoints that are not part of the API (no policy rule, not in the OpenAPI document):
#: the console's page and assets, and Prometheus' metrics.
NOT_API = ("console.", "metrics")

#: Served only over fleetflow's simulated cloud.
SIMULATED_ONLY = ("fleetflow.api.placement.routes",)


class Api(flask_smorest.Api):
    """flask-smorest Api answering errors in fleetflow's single format.

    Its OpenAPI document is written when it is first read (``api.spec``: the
    ``/openapi.json`` route, ``flask openapi print``), not when the app is built:
    the blueprints' operations are put in it then, in the order they were
    registered, followed by what :meth:`defer_document` was given. Writing it
    was most of the time an app took to build, and most apps (every test builds
    one) never serve it. The document is the same either way.
    """

    ERROR_SCHEMA = errors.ErrorsSchema
    # Each operation lists its errors by status (api/openapi.py); a "default"
    # answer would also stand for successes an operation does not document.
    DEFAULT_ERROR_RESPONSE_NAME = None

    def __init__(self, app=None, **kwargs):
        self._spec = None
        # What is left to write in the document, in order; each step is dropped once
        # done, so another thread reading the document waits for the last one.
        self._undocumented = []
        self._documenting = threading.RLock()
        self._writing = False
        super().__init__(app, **kwargs)

    @property
    def spec(self):
        if self._undocumented:
            with self._documenting:
                # The steps read api.spec themselves: on this thread, as it is so far.
                if not self._writing:
                    self._writing = True
                    try:
                        while self._undocumented:
                            self._undocumented[0]()
                            self._undocumented.pop(0)
                    finally:
                        self._writing = False
        return self._spec

    @spec.setter
    def spec(self, value):
        self._spec = value

    def register_blueprint(self, blp, *, parameters=None, **options):
        """Register ``blp`` in the app now, its operations in the document when read."""
        name = options.get("name", blp.name)
        self._app.extensions["flask-smorest"]["blp_name_to_api"][name] = self
        self._app.register_blueprint(blp, **options)

        def document():
            # flask-smorest's register_blueprint, the documentation half.
            blp.register_views_in_doc(self, self._app, self._spec, name=name,
                                      parameters=parameters)
            self._spec.tag({"name": name, "description": blp.description})

        self._undocumented.append(document)

    def defer_document(self, step) -> None:
        """Run ``step()`` on the document when it is read, after the blueprints."""
        self._undocumented.append(step)

    def _register_error_handlers(self):
        errors.register(self._app)


class Rule(routing.Rule):
    """werkzeug's URL rule, its URL builders compiled when a URL is first built.

    werkzeug compiles two Python functions for each rule as it is added (to build
    its URL with and without extra query arguments), some 180 functions for the
    API's routes, the most costly part of an app once its OpenAPI document is
    written lazily; an app builds few URLs, for a few routes. The functions
    compiled later are the same.
    """

    def _compile_builder(self, append_unknown: bool = True):
        def build(rule, **values):
            compiled = routing.Rule._compile_builder(rule, append_unknown).__get__(rule, None)
            setattr(rule, "_build_unknown" if append_unknown else "_build", compiled)
            return compiled(**values)

        return build


def enforce_body_limit() -> None:
    """before_request hook: 413 for a body over ``[api] max_body_bytes``.

    Werkzeug enforces MAX_CONTENT_LENGTH only when a view reads the body; this
    refuses a too large Content-Length on every route, read or not. A body
    without Content-Length (chunked) is read here, through werkzeug's limited
    stream, so it is refused as soon as it passes the limit. NOTE: werkzeug
    hands the app a chunked body only when the WSGI server says it dechunked
    it (``wsgi.input_terminated``: werkzeug's server, gunicorn, waitress ...);
    under another server such a body reads as empty and never grows unbounded.
    """
    limit = flask.current_app.config["MAX_CONTENT_LENGTH"]
    length = flask.request.content_length
    if length is not None:
        if length > limit:
            raise wexc.RequestEntityTooLarge(
                f"Request body is {length} bytes; the limit is {limit}.")
    elif flask.request.headers.get("Transfer-Encoding", "").lower() == "chunked":
        # NOTE: werkzeug's limited stream stops quietly at the limit (the view
        # would then see a truncated body), so read it here and look for one
        # byte more in the server's stream.
        data = flask.request.get_data(cache=True)
        if len(data) >= limit and flask.request.environ["wsgi.input"].read(1):
            raise wexc.RequestEntityTooLarge(
                f"Request body is over the limit of {limit} bytes.")


def _configure(app: flask.Flask, conf) -> None:
    app.config.update(
        API_TITLE="fleetflow",
        API_VERSION=API_VERSION,
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        MAX_CONTENT_LENGTH=conf.api.max_body_bytes,
        # Answer errors ourselves even in tests (no exception propagation).
        PROPAGATE_EXCEPTIONS=False,
    )
    # request.get_json() refuses what the blueprints' parser refuses.
    app.json = bodies.JSONProvider(app)
    # Keys in the schemas' order: an XML list page is rooted at its first key
    # (the collection, not "links"). NOTE: Flask 2.3 dropped JSON_SORT_KEYS.
    app.json.sort_keys = False


def _document_security(api: Api, conf) -> None:
    """Describe how callers identify themselves in the OpenAPI document."""
    if conf.api.auth_strategy == auth.KEYSTONE:
        schemes = {"keystone": {"type": "apiKey", "in": "header", "name": "X-Auth-Token"}}
    else:
        schemes = {
            "project": {"type": "apiKey", "in": "header", "name": "X-Project-Id"},
            "roles": {"type": "apiKey", "in": "header", "name": "X-Roles"},
        }
    for name, scheme in schemes.items():
        api.spec.components.security_scheme(name, scheme)
    api.spec.options["security"] = [{name: [] for name in schemes}]


def register_blueprints(api: Api, modules=None) -> list:
    """Register the blueprints of ``modules`` (default :data:`BLUEPRINTS`); returns them."""
    blueprints = [importlib.import_module(module).blp
                  for module in (BLUEPRINTS if modules is None else modules)]
    for blueprint in blueprints:
        api.register_blueprint(blueprint)
    return blueprints


def create_app(conf, database=None, services=None) -> flask.Flask:
    """Build the API app for ``conf``.

    ``database`` defaults to the process-wide ``Database`` of
    ``[database] connection`` (its schema must already be upgraded);
    ``services`` seeds ``AppState.services`` (see :mod:`fleetflow.api.state`).
    """
    if database is None:
        from fleetflow.services import wiring

        database = wiring.database(conf)
    app = flask.Flask("fleetflow.api", static_folder=None)
    app.url_rule_class = Rule
    _configure(app, conf)
    state = AppState(conf=conf, database=database, enforcer=policy.make_enforcer(conf),
                     services=dict(services or {}))
    app.extensions[EXTENSION_KEY] = state

    # Order matters: refuse oversized bodies before anything reads them, know
    # the caller before checking which tenant's path they may use.
    request_metrics.install(app)
    app.register_blueprint(console_blp)
    app.before_request(enforce_body_limit)
    app.before_request(auth.authenticate)
    app.before_request(policy.check_tenant_path)
    app.before_request(bodies.refuse_undeclared_query)

    api = Api(app)
    _document_security(api, conf)
    modules = BLUEPRINTS
    if openstack_mode(conf):
        # Clients use the cloud's own Placement: fleetflow's ledger is its own.
        modules = [m for m in BLUEPRINTS if m not in SIMULATED_ONLY]
    blueprints = register_blueprints(api, modules)
    # Read now: the document is written later, from what the configuration is now.
    noauth = conf.api.auth_strategy != auth.KEYSTONE
    xml_prefixes = openapi.xml_prefixes(blueprints)
    api.defer_document(lambda: openapi.document(api, noauth=noauth, xml_prefixes=xml_prefixes))

    if conf.api.auth_strategy == auth.KEYSTONE:
        app.wsgi_app = auth.keystone_middleware(app.wsgi_app, conf)
    elif auth.noauth_exposed(conf):
        LOG.warning("auth_strategy = noauth while listening on %s: anyone who reaches "
                    "the port can act as any project, or as admin", conf.api.host)
    if conf.cors.allowed_origin:
        # Outermost, as in Placement: a browser's preflight (an OPTIONS without a
        # token) is answered before authentication, and every answer, errors and
        # 401s included, carries the CORS headers the browser needs to read it.
        app.wsgi_app = cors.CORS(app.wsgi_app, conf)
    return app
