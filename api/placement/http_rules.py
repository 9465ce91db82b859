"""What every /placement response looks like over HTTP, as OpenStack Placement's.

- ``OpenStack-API-Version`` (and ``Vary``) on every response, errors and 405s included;
- ``Location`` is an absolute URL;
- ``OPTIONS`` is 405 and ``Allow`` names only the methods a resource really has;
- an error without a Placement code says ``placement.undefined_code``, and unknown
  routes and methods use Placement's wording;
- from 1.15, responses with a representation carry ``Cache-Control: no-cache`` and
  ``Last-Modified``;
- an explicit ``Accept`` that excludes JSON is 406; a body without a
  ``Content-Type`` is 400;
- an error's body follows ``Accept`` as webob's do: JSON when none is sent (or
  ``*/*``), else the first of HTML and JSON the client accepts, else plain text.
"""

from __future__ import annotations

import html
import json

import flask
from werkzeug import exceptions as wexc
from werkzeug.http import http_date

from fleetflow.api import errors as api_errors
from fleetflow.api.placement import microversion
from fleetflow.api.placement.blueprint import blp
from fleetflow.services.placement import errors

PREFIX = blp.url_prefix
_AUTOMATIC_METHODS = {"HEAD", "OPTIONS"}
# A trait is shown and created without a body, yet with cache headers (as Placement).
_BODILESS_WITH_CACHE_HEADERS = {"placement.show_trait", "placement.create_trait"}


def _version() -> tuple[int, int]:
    """The request's version; on a request that never reached negotiation, best effort."""
    if hasattr(flask.g, "placement_version"):
        return flask.g.placement_version
    try:
        return microversion.parse_header(flask.request.headers.get(microversion.HEADER))
    except wexc.HTTPException:
        return microversion.MIN_VERSION


def _rewrite_error(response: flask.Response, detail: str | None) -> None:
    try:
        document = json.loads(response.get_data())
    except ValueError:
        return
    for error in document.get("errors", []):
        # Only the generic HTTP codes: fleetflow's own (a stale fence) keep theirs.
        if error.get("code") == api_errors.default_code(response.status_code):
            error["code"] = errors.UNDEFINED
        if detail is not None:
            error["detail"] = detail
    response.set_data(json.dumps(document))


def _error_as_accepted(response: flask.Response) -> None:
    """Turn a JSON error document into the HTML or plain text the client asked for."""
    accept = flask.request.headers.get("Accept", "")
    if not accept or accept.strip() == "*/*":
        return
    wanted = flask.request.accept_mimetypes.best_match(["text/html", "application/json"])
    if wanted == "application/json":
        return
    try:
        error = json.loads(response.get_data())["errors"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return
    status = f"{response.status_code} {error.get('title', '')}"
    detail = str(error.get("detail", ""))
    if wanted == "text/html":
        body = (f"<html>\n <head>\n  <title>{status}</title>\n </head>\n <body>\n"
                f"  <h1>{status}</h1>\n  {html.escape(detail)}<br /><br />\n\n\n"
                " </body>\n</html>")
        response.set_data(body)
        response.mimetype = "text/html"
    else:
        response.set_data(f"{status}\n\n{detail}\n\n")
        response.mimetype = "text/plain"


@blp.before_request
def _check_accept_and_content_type() -> None:
    accept = flask.request.headers.get("Accept")
    if accept and flask.request.method == "GET" \
            and not flask.request.accept_mimetypes.best_match(["application/json"]):
        raise wexc.NotAcceptable("Only application/json is provided")
    if flask.request.method in ("POST", "PUT") \
            and request_endpoint_takes_a_body(flask.request.endpoint):
        if not flask.request.headers.get("Content-Type"):
            if flask.request.content_length:
                raise errors.BadRequest("content-type header required")
            raise wexc.UnsupportedMediaType("The media type None is not supported, use "
                                            "application/json")
        if flask.request.mimetype != "application/json":
            raise wexc.UnsupportedMediaType(
                f"The media type {flask.request.mimetype} is not supported, use "
                "application/json")


# Routes that do not exist before a version answer 404 there, whatever the body.
_SINCE = {"placement.create_resource_class": (1, 2), "placement.update_resource_class": (1, 2),
          "placement.set_provider_aggregates": (1, 1), "placement.set_provider_traits": (1, 6),
          "placement.set_many_allocations": (1, 13), "placement.reshape": (1, 30)}


def request_endpoint_takes_a_body(endpoint: str | None) -> bool:
    """Every Placement write has a JSON body, but for trait and (1.7+) class creation."""
    if endpoint == "placement.create_trait":
        return False
    if endpoint in _SINCE and not microversion.at_least(*_SINCE[endpoint]):
        return False
    return not (endpoint == "placement.update_resource_class"
                and microversion.at_least(1, 7))


@blp.after_app_request
def _placement_http(response: flask.Response) -> flask.Response:
    request = flask.request
    if not (request.path == PREFIX or request.path.startswith(PREFIX + "/")):
        return response
    version = _version()
    if request.method == "OPTIONS" and response.status_code == 200:
        allowed = response.headers.get("Allow", "")
        response = flask.jsonify({"errors": [{
            "status": 405, "code": errors.UNDEFINED, "title": "Method Not Allowed",
            "detail": "The method OPTIONS is not allowed for this resource.",
            "request_id": response.headers.get("X-OpenStack-Request-Id")}]})
        response.status_code = 405
        response.headers["Allow"] = allowed
    if "Allow" in response.headers:
        methods = [m.strip() for m in response.headers["Allow"].split(",")]
        response.headers["Allow"] = ", ".join(m for m in methods
                                              if m and m not in _AUTOMATIC_METHODS)
    if response.status_code >= 400 and response.mimetype == "application/json":
        detail = None
        if response.status_code == 405:
            detail = f"The method {request.method} is not allowed for this resource."
        elif response.status_code == 404 and request.url_rule is None:
            detail = "The resource could not be found."
        _rewrite_error(response, detail)
        _error_as_accepted(response)
    elif version >= (1, 15) and (
            (response.status_code in (200, 201) and response.mimetype == "application/json")
            or request.endpoint in _BODILESS_WITH_CACHE_HEADERS):
        response.headers.setdefault("Cache-Control", "no-cache")
        response.headers.setdefault("Last-Modified", http_date())
    location = response.headers.get("Location", "")
    if location.startswith("/"):
        # Absolute, as Placement (webob) sends it.
        response.headers["Location"] = request.host_url.rstrip("/") + location
    response.headers[microversion.HEADER] = f"{microversion.SERVICE} " \
                                            f"{microversion.as_text(version)}"
    if microversion.HEADER.lower() not in response.headers.get("Vary", "").lower():
        response.headers.add("Vary", microversion.HEADER.lower())
    return response
