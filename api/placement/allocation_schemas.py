"""Placement's allocation body schemas, by microversion (list-shaped before 1.12)."""

from __future__ import annotations

import copy

from fleetflow.api.placement import microversion
from fleetflow.api.placement.schemas import RC_PATTERN, UUID_PATTERN

# Before 1.8 a consumer could be written without its project and user; Placement
# files it under this id (the default of its own incomplete_consumer_*_id options).
INCOMPLETE_CONSUMER_ID = "00000000-0000-0000-0000-000000000000"

_RESOURCES = {"type": "object", "minProperties": 1,
              "patternProperties": {RC_PATTERN: {"type": "integer", "minimum": 1}},
              "additionalProperties": False}
_OWNER = {"type": "string", "minLength": 1, "maxLength": 255}

LIST_SHAPED = {
    "type": "object",
    "properties": {"allocations": {
        "type": "array", "minItems": 1,
        "items": {"type": "object",
                  "properties": {"resource_provider": {
                      "type": "object",
                      "properties": {"uuid": {"type": "string", "format": "uuid"}},
                      "additionalProperties": False, "required": ["uuid"]},
                      "resources": _RESOURCES},
                  "required": ["resource_provider", "resources"],
                  "additionalProperties": False}}},
    "required": ["allocations"],
    "additionalProperties": False,
}
LIST_SHAPED_1_8 = copy.deepcopy(LIST_SHAPED)
LIST_SHAPED_1_8["properties"].update(project_id=_OWNER, user_id=_OWNER)
LIST_SHAPED_1_8["required"] += ["project_id", "user_id"]

DICT_SHAPED_1_12 = {
    "type": "object",
    "properties": {
        "allocations": {
            "type": "object", "minProperties": 1,
            "patternProperties": {UUID_PATTERN: {
                "type": "object",
                "properties": {"generation": {"type": "integer"}, "resources": _RESOURCES},
                "required": ["resources"], "additionalProperties": False}},
            "additionalProperties": False},
        "project_id": _OWNER,
        "user_id": _OWNER,
    },
    "additionalProperties": False,
    "required": ["allocations", "project_id", "user_id"],
}
DELETABLE = copy.deepcopy(DICT_SHAPED_1_12)
DELETABLE["properties"]["allocations"]["minProperties"] = 0
DICT_SHAPED_1_28 = copy.deepcopy(DELETABLE)
DICT_SHAPED_1_28["properties"]["consumer_generation"] = {"type": ["integer", "null"]}
DICT_SHAPED_1_28["required"].append("consumer_generation")
DICT_SHAPED_1_34 = copy.deepcopy(DICT_SHAPED_1_28)
DICT_SHAPED_1_34["properties"]["mappings"] = {
    "type": "object", "minProperties": 1,
    "patternProperties": {"[a-zA-Z0-9_-]{1,64}": {
        "type": "array", "minItems": 1, "items": {"type": "string", "format": "uuid"}}}}
DICT_SHAPED_1_38 = copy.deepcopy(DICT_SHAPED_1_34)
DICT_SHAPED_1_38["properties"]["consumer_type"] = {"type": "string", "pattern": RC_PATTERN,
                                                   "minLength": 1, "maxLength": 255}
DICT_SHAPED_1_38["required"].append("consumer_type")


def one_consumer() -> dict:
    """The schema of one consumer's allocations at the request's version."""
    for version, schema in (((1, 38), DICT_SHAPED_1_38), ((1, 34), DICT_SHAPED_1_34),
                            ((1, 28), DICT_SHAPED_1_28), ((1, 12), DICT_SHAPED_1_12),
                            ((1, 8), LIST_SHAPED_1_8)):
        if microversion.at_least(*version):
            return schema
    return LIST_SHAPED


def many_consumers(at_least_1_28: bool = False) -> dict:
    """POST /allocations (1.13+): consumers by uuid, each may empty its allocations.

    ``at_least_1_28``: the reshaper's, which needs consumer generations at any version.
    """
    each = DICT_SHAPED_1_28 if at_least_1_28 else DELETABLE
    for version, schema in (((1, 38), DICT_SHAPED_1_38), ((1, 34), DICT_SHAPED_1_34),
                            ((1, 28), DICT_SHAPED_1_28)):
        if microversion.at_least(*version):
            each = schema
            break
    return {"type": "object", "minProperties": 1, "additionalProperties": False,
            "patternProperties": {UUID_PATTERN: each}}


def as_dict_shaped(data: dict) -> dict:
    """A list-shaped (pre-1.12) body's allocations as ``{rp: {"resources": ...}}``."""
    allocations = data["allocations"]
    if isinstance(allocations, dict):
        return allocations
    merged: dict[str, dict] = {}
    for item in allocations:
        rp = item["resource_provider"]["uuid"]
        merged.setdefault(rp, {"resources": {}})["resources"].update(item["resources"])
    return merged
