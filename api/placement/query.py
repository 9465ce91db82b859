"""Query parameters as Placement reads them: schema per microversion, ``resources``,
``member_of`` and ``required`` with their version gates, and Placement's 400 wording."""

from __future__ import annotations

import re
import uuid as uuidlib

import flask

from fleetflow.api.placement import microversion, schemas
from fleetflow.api.placement.blueprint import service
from fleetflow.services.placement import errors

_RESOURCE_CLASS = re.compile(schemas.RC_PATTERN)


def provider_list_schema() -> dict:
    """Placement's GET /resource_providers query schema at the request's version."""
    properties = {"name": {"type": "string"}, "uuid": {"type": "string", "format": "uuid"}}
    if microversion.at_least(1, 3):
        properties["member_of"] = {"type": "string"}
    if microversion.at_least(1, 4):
        properties["resources"] = {"type": "string"}
    if microversion.at_least(1, 14):
        properties["in_tree"] = {"type": "string", "format": "uuid"}
    if microversion.at_least(1, 18):
        properties["required"] = {"type": "string"}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def validate(schema: dict) -> None:
    """400 ``Invalid query string parameters: ...`` when the query does not fit ``schema``."""
    error = schemas.first_error(flask.request.args.to_dict(), schema)
    if error is not None:
        raise errors.BadRequest(f"Invalid query string parameters: {error}")


def parse_resources(text: str) -> dict[str, int]:
    """``"VCPU:2,MEMORY_MB:2048"`` -> ``{"VCPU": 2, "MEMORY_MB": 2048}`` (BadRequest).

    The wording is Placement's, which its clients and tests match.
    """
    if not (text or "").strip():
        raise errors.BadRequest("Badly formed resources parameter. Expected resources query "
                                "string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. "
                                "Got: empty string.")
    resources: dict[str, int] = {}
    for item in text.split(","):
        rc, sep, amount = item.partition(":")
        if not sep or ":" in amount:
            raise errors.BadRequest("Badly formed resources parameter. Expected resources "
                                    "query string parameter in form: "
                                    f"?resources=VCPU:2,MEMORY_MB:1024. Got: {item}.")
        try:
            number = int(amount)
        except ValueError:
            raise errors.BadRequest(f"Requested resource {rc} expected positive integer "
                                    f"amount. Got: {amount}.") from None
        if number < 1:
            raise errors.BadRequest(f"Requested resource {rc} requires amount >= 1. "
                                    f"Got: {number}.")
        if not _RESOURCE_CLASS.match(rc):
            raise errors.BadRequest(f"Invalid resource class in resources parameter: No "
                                    f"such resource class {rc}.")
        resources[rc] = number
    return resources


def _is_uuid(value: str) -> bool:
    try:
        uuidlib.UUID(value)
    except ValueError:
        return False
    return True


def member_of(suffix: str = "") -> tuple[list[set[str]], set[str]]:
    """(groups of aggregates, one of each needed; forbidden aggregates) of ``member_of``."""
    key = "member_of" + suffix
    values = flask.request.args.getlist(key)
    if len(values) > 1 and not microversion.at_least(1, 24):
        raise errors.BadRequest(f"Multiple {key} parameters are not supported")
    required: list[set[str]] = []
    forbidden: set[str] = set()
    for value in values:
        if "," in value and not value.startswith(("in:", "!in:")):
            raise errors.BadRequest(
                "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' "
                f"keyword using the valid microversion. Got: {value}")
        wanted: set[str] = set()
        refused: set[str] = set()
        if value.startswith("!in:"):
            refused = set(value[4:].split(","))
        elif value.startswith("!"):
            refused = {value[1:]}
        elif value.startswith("in:"):
            wanted = set(value[3:].split(","))
        else:
            wanted = {value}
        for aggregate in wanted | refused:
            if not _is_uuid(aggregate):
                raise errors.BadRequest(
                    "Invalid query string parameters: Expected 'member_of' parameter to "
                    f"contain valid UUID(s). Got: {aggregate}")
        if refused and not microversion.at_least(1, 32):
            raise errors.BadRequest(f"Forbidden {key} parameters are not supported in the "
                                    "specified microversion")
        if wanted:
            required.append(wanted)
        forbidden |= refused
    return required, forbidden


def required_traits(suffix: str = "") -> tuple[list[set[str]], set[str]]:
    """(groups of traits, one of each needed; forbidden traits) of ``required``."""
    allow_forbidden = microversion.at_least(1, 22)
    allow_any = microversion.at_least(1, 39)
    values = flask.request.args.getlist("required" + suffix)
    if not allow_any:
        values = values[-1:]
    required: list[set[str]] = []
    forbidden: set[str] = set()
    for value in values:
        if value.startswith("in:"):
            if not allow_any:
                raise errors.BadRequest(
                    "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,"
                    f"CUSTOM_MAGIC' only supported since microversion 1.39. Got: {value}")
            group = {t.strip() for t in value[3:].split(",")}
            if not all(group):
                raise errors.BadRequest(
                    "Invalid query string parameters: Expected 'required' parameter value "
                    "of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: "
                    f"{value}")
            if any(t.startswith("!") for t in group):
                raise errors.BadRequest(
                    "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,"
                    f"CUSTOM_MAGIC' does not support forbidden traits. Got: {value}")
            required.append(group)
            continue
        names = [t.strip() for t in value.split(",")]
        refused = {t.lstrip("!") for t in names if t.startswith("!")}
        if not all(names) or not all(refused):
            form = "HW_CPU_X86_VMX,!CUSTOM_MAGIC" if allow_forbidden \
                else "HW_CPU_X86_VMX,CUSTOM_MAGIC"
            raise errors.BadRequest(
                f"Invalid query string parameters: Expected 'required' parameter value of "
                f"the form: {form}. Got an empty trait in: {value}")
        if refused and not allow_forbidden:
            raise errors.BadRequest(
                "Invalid query string parameters: Expected 'required' parameter value of "
                f"the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: {value}")
        required += [{t} for t in names if not t.startswith("!")]
        forbidden |= refused
    return required, forbidden


def check_traits_exist(required: list[set[str]], forbidden: set[str],
                       parameter: str = '"required" parameter') -> None:
    named = set().union(*required, forbidden) if required else set(forbidden)
    unknown = service().unknown_traits(named)
    if unknown:
        raise errors.BadRequest(f"Invalid trait(s) in {parameter}: No such trait(s): "
                                f"{', '.join(unknown)}.")
