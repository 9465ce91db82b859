"""What the OpenAPI document says about every operation beyond its own schemas.

The resource blueprints document their bodies and successful answers; what
every operation shares is added here once, after they are registered, so no
route can forget it:

- the errors it can answer, each in the one error format: 400 (invalid input),
  401 (no identity), 403 (policy, another project's path, quota), 404 (an
  unknown resource in the path), 409 (a write that conflicts with the state),
  413 (a body over ``[api] max_body_bytes``), 415 (a body that is not of a
  documented media type), 422 (an Idempotency-Key reused with another body),
  406 under ``/placement`` (a microversion out of range);
- ``X-User-Id`` beside the identity headers of the security schemes (noauth),
  and the ``X-OpenStack-Request-Id`` every answer carries;
- XML, where a blueprint speaks it (:mod:`fleetflow.api.xml`): the same
  schemas as ``application/xml`` bodies and answers;
- ``/placement``'s bodies and answers (:mod:`fleetflow.api.placement.openapi`).
"""

from __future__ import annotations

import inspect
import re

from fleetflow.api import errors, xml
from fleetflow.api.placement import openapi as placement_openapi

METHODS = ("get", "put", "post", "delete", "patch")
WRITES = ("put", "post", "delete", "patch")

ERRORS = {
    "400": "Invalid input: each error names the field, query parameter or header.",
    "401": "No identity (noauth: no X-Project-Id nor an X-Auth-Token PROJECT:ROLE[,ROLE]; "
           "keystone: no valid X-Auth-Token).",
    "403": "Not allowed: the policy, another project's path, or a quota.",
    "404": "No such resource (another project's resource answers 404 too).",
    "405": "/placement: the method is not available at the OpenStack-API-Version asked "
           "for (or the default, 1.0).",
    "406": "The OpenStack-API-Version asked for is outside the supported range.",
    "409": "Conflicts with the resource's current state (or a stale generation).",
    "413": "The request body is larger than the configured limit.",
    "415": "The request body is not of a media type the operation takes.",
    "422": "The Idempotency-Key was used before with a different request body.",
}

XML_DESCRIPTION = (
    "The same document as XML (Content-Type or Accept application/xml): the top key "
    "is the root element, scalars are attributes, lists are a container of item "
    "elements, metadata and capabilities are <meta key=\"...\"> entries.")

USER_HEADER = {
    "in": "header", "name": "X-User-Id", "required": False,
    "schema": {"type": "string"},
    "description": "noauth: the user acting in X-Project-Id (recorded with what it "
                   "starts). Keystone sets it from the token.",
}

SECURITY_DESCRIPTIONS = {
    "project": "noauth: the caller's project (without it: 401).",
    "roles": "noauth: the caller's roles, comma separated (admin, member, reader).",
    "keystone": "A Keystone token (auth_strategy = keystone).",
}


def _error_statuses(path: str, method: str, operation: dict, path_params: list) -> list:
    # Errors the route documents itself (a 404 for a host named in the body).
    statuses = [s for s in operation.get("responses", {}) if s in ERRORS]
    statuses += ["400", "401", "403", "413"]
    params = [p for p in (operation.get("parameters") or []) + path_params
              if p.get("in") == "path"]
    if any(p["name"] != "tenant_id" for p in params):
        statuses.append("404")
    if method in WRITES:
        statuses.append("409")
    if "requestBody" in operation:
        statuses.append("415")
    if any(p.get("name") == "Idempotency-Key" for p in operation.get("parameters") or []):
        statuses.append("422")
    if path.startswith("/placement"):
        statuses += ["404", "405", "406", "409"]
    return sorted(set(statuses))


# Response headers routes document with ``@blp.response(..., headers=...)``.
LOCATION = {"description": "The URL of what was created (its status, for a 202).",
            "required": True, "schema": {"type": "string"}}
REPLAYED = {"description": "true when an Idempotency-Key was used before: the answer is "
                           "the first request's, nothing new was made.",
            "required": False, "schema": {"type": "string", "enum": ["true"]}}

REQUEST_ID_HEADER = {
    "description": "The request's id (req-<uuid>), also in every error's request_id: "
                   "quote it to the operator.",
    "required": True, "schema": {"type": "string"}}


def _add_request_id(response: dict) -> None:
    if "$ref" not in response:
        response.setdefault("headers", {})[errors.REQUEST_ID_HEADER] = REQUEST_ID_HEADER


def _error_responses(spec, with_xml: bool) -> dict:
    """Component names of the error responses, registered once per media-type set."""
    suffix = "_XML" if with_xml else ""
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}
    if with_xml:
        content[xml.XML_MIMETYPE] = content["application/json"]
    names = {}
    for status, description in ERRORS.items():
        name = f"ERROR_{status}{suffix}"
        if name not in spec.components.responses:
            spec.components.response(name, {
                "description": description, "content": content,
                "headers": {errors.REQUEST_ID_HEADER: REQUEST_ID_HEADER}})
        names[status] = {"$ref": f"#/components/responses/{name}"}
    return names


def _add_xml(operation: dict) -> None:
    body = operation.get("requestBody", {}).get("content", {})
    if "application/json" in body:
        body[xml.XML_MIMETYPE] = body["application/json"]
        operation["requestBody"].setdefault("description", XML_DESCRIPTION)
    for response in operation.get("responses", {}).values():
        content = response.get("content") if isinstance(response, dict) else None
        if content and "application/json" in content:
            content[xml.XML_MIMETYPE] = content["application/json"]


def xml_prefixes(blueprints) -> tuple[str, ...]:
    """URL prefixes, as the document writes them, of the blueprints that speak XML."""
    return tuple(re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", blueprint.url_prefix)
                 for blueprint in blueprints
                 if isinstance(blueprint.ARGUMENTS_PARSER, xml.XmlBodyParser))


def _describe_schemas(api) -> None:
    """Each component schema without a description takes its class's docstring.

    The docstrings say what JSON Schema cannot: rules across fields (count
    or min_count/max_count, at least one of ...), and what is read-only.
    """
    schemas = api.spec.components.schemas
    for key, name in api.ma_plugin.converter.refs.items():
        # The key is (schema class, modifiers...); only the class's own
        # docstring counts, not one it inherits.
        schema_class = key[0]
        if name not in schemas:
            continue
        doc = schema_class.__dict__.get("__doc__")
        if doc:
            schemas[name].setdefault("description", inspect.cleandoc(doc))
        # JSON Schema keywords a schema class states for itself, for rules
        # marshmallow checks in a validator (minProperties for "at least one").
        schemas[name].update(schema_class.__dict__.get("JSON_SCHEMA", {}))


def document(api, noauth: bool, xml_prefixes=()) -> None:
    """Complete ``api.spec`` (flask-smorest's) once every blueprint is registered.

    ``noauth``: whether callers identify themselves with noauth's headers
    (``[api] auth_strategy``); ``xml_prefixes``: URL prefixes (with
    ``{tenant_id}``) of the blueprints that read and answer XML.
    """
    spec = api.spec
    _describe_schemas(api)
    placement_openapi.document(spec)
    for name, scheme in spec.components.security_schemes.items():
        if name in SECURITY_DESCRIPTIONS:
            scheme.setdefault("description", SECURITY_DESCRIPTIONS[name])
    # NOTE: apispec keeps the paths in ``_paths`` and has no public way to
    # amend an operation once registered.
    for path, item in spec._paths.items():
        speaks_xml = path.startswith(tuple(xml_prefixes))
        error_refs = _error_responses(spec, speaks_xml)
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            # Every error is listed by status; "default" would also claim the
            # successful answers of an operation that documents none.
            responses.pop("default", None)
            for status in _error_statuses(path, method, operation, item.get("parameters", [])):
                responses[status] = error_refs[status]
            for response in responses.values():
                _add_request_id(response)
            if noauth:
                operation.setdefault("parameters", []).append(USER_HEADER)
            if speaks_xml:
                _add_xml(operation)
