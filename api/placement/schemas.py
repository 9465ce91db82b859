"""Request bodies checked against JSON schemas, with Placement's error wording.

Placement validates its bodies with jsonschema and answers ``400 JSON does not
validate: <jsonschema's message>``; clients and tests match on that text, so
the same library and the same wording are used here.
"""

from __future__ import annotations

import functools
import json
import uuid as uuidlib

import flask
import jsonschema
from werkzeug import exceptions as wexc

from fleetflow.api import bodies
from fleetflow.services.placement import errors

RC_PATTERN = "^[A-Z0-9_]+$"
CUSTOM_PATTERN = "^CUSTOM_[A-Z0-9_]+$"
UUID_PATTERN = "^[0-9a-fA-F-]{36}$"

FORMAT_CHECKER = jsonschema.FormatChecker()


@FORMAT_CHECKER.checks("uuid")
def _is_uuid(instance) -> bool:
    if not isinstance(instance, str):
        return True  # "type" says what is wrong with a non-string
    try:
        uuidlib.UUID(instance)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=256)
def _validator_of(schema_json: str):
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=FORMAT_CHECKER)


def first_error(data, schema: dict) -> jsonschema.ValidationError | None:
    """What ``jsonschema.validate(data, schema)`` would raise, or None.

    NOTE: ``jsonschema.validate`` checks the schema against its meta-schema
    on every call, which took more than half the CPU of a claim
    (``PUT /allocations``). Views build their schemas per request (by
    microversion), so the checked validator is kept per schema content.
    """
    validator = _validator_of(json.dumps(schema, sort_keys=True))
    return jsonschema.exceptions.best_match(validator.iter_errors(data))


def validate(data, schema: dict):
    """``data`` if it matches ``schema``, else Placement's 400."""
    error = first_error(data, schema)
    if error is not None:
        raise errors.BadRequest(f"JSON does not validate: {error}")
    return data


def json_body(schema: dict):
    """The request's JSON body, checked against ``schema`` (415 / 400)."""
    if flask.request.mimetype != "application/json":
        raise wexc.UnsupportedMediaType(
            f"The media type {flask.request.mimetype or 'None'} is not supported, use "
            "application/json")
    try:
        data = bodies.decode(flask.request.get_data(cache=True))
    except bodies.BodyError as exc:
        raise errors.BadRequest(f"Malformed JSON: {exc.describe()}") from None
    return validate(data, schema)


RESOURCE_CLASS_NAME = {"type": "string", "pattern": CUSTOM_PATTERN, "maxLength": 255}
RESOURCE_CLASS = {"type": "object", "properties": {"name": RESOURCE_CLASS_NAME},
                  "required": ["name"], "additionalProperties": False}
_AGGREGATE_LIST = {"type": "array", "items": {"type": "string", "format": "uuid"},
                   "uniqueItems": True}
AGGREGATES_1_1 = _AGGREGATE_LIST
AGGREGATES_1_19 = {
    "type": "object",
    "properties": {"aggregates": _AGGREGATE_LIST,
                   "resource_provider_generation": {"type": "integer"}},
    "required": ["aggregates", "resource_provider_generation"],
    "additionalProperties": False,
}
INVENTORY_FIELDS = {
    "resource_provider_generation": {"type": "integer"},
    "total": {"type": "integer", "maximum": 2147483647, "minimum": 1},
    "reserved": {"type": "integer", "maximum": 2147483647, "minimum": 0},
    "min_unit": {"type": "integer", "maximum": 2147483647, "minimum": 1},
    "max_unit": {"type": "integer", "maximum": 2147483647, "minimum": 1},
    "step_size": {"type": "integer", "maximum": 2147483647, "minimum": 1},
    "allocation_ratio": {"type": "number", "maximum": 3.40282e+38},
}
