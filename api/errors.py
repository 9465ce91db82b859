"""One error format for every failure the API can answer.

Every error body is::

    {"errors": [{"status": 404, "code": "fleetflow.not_found", "title": "Not Found",
                 "detail": "Host h-1 does not exist.", "request_id": "req-..."}]}

(the format of OpenStack Placement, so its clients understand ours). It is
produced for:

- ``flask_smorest.abort(status, message=..., code=...)`` and any werkzeug
  ``HTTPException`` (unknown route 404, 405, 413 ...);
- request validation: webargs' 422 becomes **400**, with one error per bad
  field whose ``detail`` names it (``host.state``); unknown fields are errors
  too, since marshmallow rejects them;
- :class:`fleetflow.common.exceptions.FleetflowError` (its ``status``/``code``);
- a database out of reach (a lost or refused connection, a retry window that
  closed on one, a SQLite file that cannot be opened): **503**
  ``fleetflow.service_unavailable`` with ``Retry-After``, since the request
  may well succeed in a few seconds; the request's transaction never
  committed, so nothing of it was written. Logged as one line, at most once
  a minute with a count, its traceback at DEBUG: while the database is down
  every request fails the same way;
- any other exception: 500, logged with its traceback, nothing leaked.

The request id is the same in the body and in the ``X-OpenStack-Request-Id``
header of every response (see :func:`request_id`).
"""

from __future__ import annotations

import http
import logging
import uuid

import flask
import marshmallow as ma
from werkzeug import exceptions as wexc

from fleetflow.common import exceptions
from fleetflow.common.log_throttle import Throttle, first_line
from fleetflow.services.outage import database_unreachable

LOG = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-OpenStack-Request-Id"

# Codes of plain HTTP errors; other statuses get "fleetflow.<reason_phrase>".
HTTP_CODES = {
    400: "fleetflow.invalid_input",
    401: "fleetflow.unauthorized",
    403: "fleetflow.forbidden",
    404: "fleetflow.not_found",
    405: "fleetflow.method_not_allowed",
    409: "fleetflow.conflict",
    413: "fleetflow.request_too_large",
    500: "fleetflow.internal_error",
    503: exceptions.ServiceUnavailable.code,
}

#: Seconds a client is asked to wait (``Retry-After``) while the database is out of reach.
RETRY_AFTER_SECONDS = 5
# One per process: the database is down for every request of the process at once.
_database_outage = Throttle()

# Where webargs found a bad value, as a client would say it.
LOCATIONS = {"json": "body", "query": "query parameter", "view_args": "path parameter",
             "headers": "header", "form": "form field"}


class ErrorSchema(ma.Schema):
    """One error (documentation of the format; bodies are built by make_error)."""

    status = ma.fields.Integer(required=True, metadata={"description": "HTTP status"})
    code = ma.fields.String(required=True,
                            metadata={"description": "Stable machine-readable code"})
    title = ma.fields.String(required=True, metadata={"description": "HTTP reason phrase"})
    detail = ma.fields.String(required=True, metadata={"description": "What went wrong"})
    request_id = ma.fields.String(required=True,
                                  metadata={"description": "Same as X-OpenStack-Request-Id"})


class ErrorsSchema(ma.Schema):
    """Body of every error response."""

    errors = ma.fields.List(ma.fields.Nested(ErrorSchema), required=True)


def request_id() -> str:
    """The id of the current request (``req-<uuid>``), made on first use.

    NOTE: made lazily rather than in a before_request hook, because an earlier
    hook (auth, body limit) may fail first and its error needs the id too.
    """
    rid = getattr(flask.g, "request_id", None)
    if rid is None:
        rid = flask.g.request_id = f"req-{uuid.uuid4()}"
    return rid


def _title(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def default_code(status: int) -> str:
    """The code of an error that names none of its own."""
    return HTTP_CODES.get(status) or "fleetflow." + _title(status).lower().replace(" ", "_")


def make_error(status: int, detail: str, code: str | None = None) -> dict:
    """One error object of the format."""
    return {"status": status, "code": code or default_code(status), "title": _title(status),
            "detail": detail, "request_id": request_id()}


def error_response(status: int, errors: list[dict], headers=None) -> flask.Response:
    response = flask.jsonify({"errors": errors})
    response.status_code = status
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def _flatten(messages, path=()):
    """Yield (dotted field path, message) from marshmallow's nested error dict."""
    if isinstance(messages, dict):
        for key, value in messages.items():
            yield from _flatten(value, path if key == "_schema" else path + (str(key),))
    elif isinstance(messages, list | tuple):
        for item in messages:
            yield from _flatten(item, path)
    else:
        yield ".".join(path), str(messages)


def validation_errors(messages: dict, status: int = 400) -> list[dict]:
    """One error per bad field; ``detail`` names the field and where it was."""
    errors = []
    for location, fields in messages.items():
        where = LOCATIONS.get(location, location)
        for field, message in _flatten(fields):
            if field:
                detail = f"Invalid {where} field '{field}': {message}"
            else:
                detail = f"Invalid {where}: {message}"
            errors.append(make_error(status, detail, HTTP_CODES[400]))
    return errors or [make_error(status, "Invalid request.")]


def handle_http_exception(error: wexc.HTTPException):
    """Werkzeug/Flask HTTP errors and flask-smorest ``abort``."""
    status = error.code or 500
    data = getattr(error, "data", None) or {}
    # Keep headers that carry meaning (Allow on 405, WWW-Authenticate on 401),
    # not the HTML content type werkzeug would send.
    headers = {k: v for k, v in error.get_headers() if k.lower() != "content-type"}
    headers.update(data.get("headers") or {})
    if "messages" in data and status in (400, 422):
        # NOTE: webargs answers 422 for a body that fails its schema; the API
        # says 400 (what OpenStack clients expect), naming the bad fields.
        return error_response(400, validation_errors(data["messages"]), headers)
    detail = data.get("message") or error.description or _title(status)
    return error_response(status, [make_error(status, str(detail), data.get("code"))], headers)


def handle_fleetflow_error(error: exceptions.FleetflowError):
    """Domain errors raised anywhere below the API carry their own status and code."""
    if isinstance(error, exceptions.ServiceUnavailable):
        return service_unavailable(error, error.message)
    if error.status >= 500:
        LOG.error("%s %s failed (%s): %s", flask.request.method, flask.request.path,
                  request_id(), error)
    return error_response(error.status, [make_error(error.status, error.message, error.code)])


def service_unavailable(error: Exception, detail: str) -> flask.Response:
    """503 with ``Retry-After``: what the request needs is out of reach for now."""
    LOG.debug("%s %s failed (%s): service unavailable", flask.request.method,
              flask.request.path, request_id(), exc_info=error)
    _database_outage.expire()
    hit = _database_outage.hit()
    if hit is not None:
        held = "" if hit.first else f" ({hit.held} more in the last {hit.window:.0f} s)"
        LOG.warning("answering 503 to %s %s (%s): %s%s", flask.request.method,
                    flask.request.path, request_id(), first_line(error), held)
    return error_response(503, [make_error(503, detail, exceptions.ServiceUnavailable.code)],
                          {"Retry-After": str(RETRY_AFTER_SECONDS)})


def handle_unexpected(error: Exception):
    """Anything else: a 500 that says nothing about the internals; the log says all."""
    if isinstance(error, wexc.HTTPException):  # pragma: no cover - routed above
        return handle_http_exception(error)
    if database_unreachable(error):
        return service_unavailable(
            error, f"The database is unreachable for now; try again in "
                   f"{RETRY_AFTER_SECONDS} seconds.")
    LOG.exception("%s %s failed (%s)", flask.request.method, flask.request.path, request_id())
    detail = f"Internal error; quote request id {request_id()} to the operator."
    return error_response(500, [make_error(500, detail)])


def add_request_id(response: flask.Response) -> flask.Response:
    """after_request hook: the request id header on every response."""
    response.headers[REQUEST_ID_HEADER] = request_id()
    return response


def register(app: flask.Flask) -> None:
    """Install the handlers and the request-id header on ``app``."""
    app.register_error_handler(wexc.HTTPException, handle_http_exception)
    app.register_error_handler(exceptions.FleetflowError, handle_fleetflow_error)
    app.register_error_handler(Exception, handle_unexpected)
    app.after_request(add_request_id)
