"""How every request body and query string is read, before any schema sees it.

One decoder for every JSON body (the webargs parser of the blueprints and
``request.get_json`` of the ``/placement`` views, through the app's JSON
provider) refuses, as a 400 naming where in the document:

- nesting deeper than :data:`MAX_DEPTH` (Python's decoder would otherwise
  recurse until it fails);
- integer literals longer than :data:`MAX_INTEGER_DIGITS` (Python refuses to
  convert those over 4,300 digits; none of ours needs more than a handful),
  ``NaN``/``Infinity`` and numbers too large for a float;
- strings (values and keys) holding a lone surrogate, which no encoding can
  store, or NUL, which PostgreSQL's text columns cannot hold.

The parser answers 415 for a body in a media type the route does not read
(``application/json`` exactly: ``application/foo+json`` is another type, whatever
its suffix says, as in OpenStack's own APIs), and 400 for query parameters the
route does not declare (as OpenStack APIs do); :func:`refuse_undeclared_query`
does the same for routes that declare none. Fields with their own rules
(bounded integers, names, free text) are in :mod:`fleetflow.api.fields`.
"""

from __future__ import annotations

import json
import math

import flask
import marshmallow as ma
from flask.json.provider import DefaultJSONProvider
from flask_smorest import abort
from webargs import core
from webargs.flaskparser import FlaskParser

JSON_MIMETYPE = "application/json"
# Far deeper than any document of the API (a vcluster's is six levels deep).
MAX_DEPTH = 64
MAX_INTEGER_DIGITS = 30


class BodyError(ValueError):
    """A body that is JSON but not one the API will read; ``path`` is where."""

    def __init__(self, message: str, path: tuple = ()):
        super().__init__(message)
        self.message = message
        self.path = path

    def describe(self) -> str:
        where = ".".join(str(part) for part in self.path)
        return f"Invalid body field '{where}': {self.message}" if where else \
            f"Invalid body: {self.message}"


def _parse_int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise BodyError(f"an integer of {digits} digits is out of range")
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise BodyError(f"the number {literal[:40]} is out of range")
    return value


def _parse_constant(name: str):
    raise BodyError(f"{name} is not a JSON value")


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "must not contain NUL characters"
    # NOTE: encode() is the fast path; it fails only on a lone surrogate.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"must not contain a lone surrogate (U+{ord(text[exc.start]):04X})"
    return None


def check_document(document) -> None:
    """Raise :class:`BodyError` at the first place ``document`` is too deep or holds
    a string no column can store. Iterative: depth costs no stack."""
    pending = [(document, ())]
    while pending:
        value, path = pending.pop()
        if isinstance(value, str):
            problem = _string_problem(value)
            if problem:
                raise BodyError(problem, path)
            continue
        if isinstance(value, dict | list) and len(path) >= MAX_DEPTH:
            raise BodyError(f"nested deeper than {MAX_DEPTH} levels", path[:3] + ("...",))
        if isinstance(value, dict):
            for key, item in value.items():
                problem = _string_problem(key)
                if problem:
                    raise BodyError(f"a key {problem}", path)
                pending.append((item, path + (key,)))
        elif isinstance(value, list):
            pending.extend((item, path + (index,)) for index, item in enumerate(value))


def decode(data: bytes | str):
    """The JSON document of a request body, or :class:`BodyError`."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        document = json.loads(data, parse_int=_parse_int, parse_float=_parse_float,
                              parse_constant=_parse_constant)
    except RecursionError:
        raise BodyError(f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise BodyError(f"not valid JSON ({exc})") from None
    except BodyError:
        raise
    except ValueError as exc:  # int() and float() limits of the literals
        raise BodyError(f"not valid JSON ({exc})") from None
    check_document(document)
    return document


class JSONProvider(DefaultJSONProvider):
    """The app's JSON: ``request.get_json()`` decodes with :func:`decode` too."""

    def loads(self, s, **kwargs):
        return decode(s)


class BodyParser(FlaskParser):
    """The webargs parser of every blueprint.

    ``MEDIA_TYPES`` are the body types its routes read (415 for others).
    """

    # NOTE: webargs says 422 for a body that fails validation; we say 400 (as
    # OpenStack does), and this makes the OpenAPI document say 400 too.
    DEFAULT_VALIDATION_STATUS = 400
    DEFAULT_UNKNOWN_BY_LOCATION = {**FlaskParser.DEFAULT_UNKNOWN_BY_LOCATION,
                                   "query": ma.RAISE, "querystring": ma.RAISE}
    MEDIA_TYPES: tuple[str, ...] = (JSON_MIMETYPE,)

    def reads(self, request: flask.Request) -> bool:
        """Whether the body is of a type this parser reads."""
        # NOTE: not webargs' is_json_request, which takes any "+json" type too.
        return request.mimetype == JSON_MIMETYPE

    def refuse_media_type(self, request: flask.Request) -> None:
        """415 for a body of another type; a request without body or type reads as empty."""
        if request.mimetype or request.get_data(cache=True):
            abort(415, message=f"A body of type {request.mimetype or '(none)'} is not "
                               f"supported here; send {' or '.join(self.MEDIA_TYPES)} "
                               "(Content-Type header).")

    def _raw_load_json(self, req: flask.Request):
        if not self.reads(req):
            self.refuse_media_type(req)
            return core.missing
        data = req.get_data(cache=True)
        if not data:
            return core.missing
        try:
            return decode(data)
        except BodyError as exc:
            abort(400, message=exc.describe())


def _declared_locations(view, method: str) -> set[str] | None:
    """Where the view's arguments come from (``query``, ``json``), None if unknown."""
    view_class = getattr(view, "view_class", None)
    if view_class is None:
        return None
    apidoc = getattr(getattr(view_class, method.lower(), None), "_apidoc", {})
    parameters = (apidoc.get("arguments") or {}).get("parameters", [])
    # flask-smorest records the location as OpenAPI's "in" (query, path ...).
    return {parameter.get("in") or parameter.get("location") for parameter in parameters
            if isinstance(parameter, dict)}


def refuse_undeclared_query() -> None:
    """before_request hook: 400 for a query parameter on a /v2 route that takes none.

    Routes that declare query arguments refuse unknown ones in their parser.
    """
    request = flask.request
    if (not request.args or not request.path.startswith("/v2/") or request.endpoint is None
            or request.method == "OPTIONS"):
        return
    view = flask.current_app.view_functions.get(request.endpoint)
    # HEAD is answered by the GET view, with the GET view's parameters.
    locations = _declared_locations(view, "GET" if request.method == "HEAD" else request.method)
    if locations is None or locations & {"query", "querystring"}:
        return
    name = sorted(request.args)[0]
    abort(400, message=f"Invalid query parameter '{name}': this route takes no query "
                       "parameters.")
