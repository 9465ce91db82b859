"""``GET /allocation_candidates`` query parameters, as Placement validates them.

The unsuffixed request group's resources, traits, ``member_of`` (1.21+) and
``in_tree`` (1.31+) are honoured across provider trees and sharing providers
(persistence/placement/tree_candidates.py); suffixed request groups (1.25+),
``same_subtree`` and ``root_required`` are refused.
"""

from __future__ import annotations

import re

import flask

from fleetflow.api.placement import microversion, query
from fleetflow.persistence.placement import (
    candidates,
    catalog,
    errors,
    providers,
    tree_candidates,
)

_GROUP_KEYS = ("resources", "required", "member_of", "in_tree")


def schema() -> dict:
    """Placement's query schema of GET /allocation_candidates at the request's version."""
    properties: dict = {"resources": {"type": "string"}}
    out = {"type": "object", "properties": properties, "required": ["resources"],
           "additionalProperties": False}
    if microversion.at_least(1, 16):
        properties["limit"] = {"type": ["integer", "string"], "pattern": "^[1-9][0-9]*$",
                               "minimum": 1, "minLength": 1}
    if microversion.at_least(1, 17):
        properties["required"] = {"type": ["string"]}
    if microversion.at_least(1, 21):
        properties["member_of"] = {"type": ["string"]}
    if microversion.at_least(1, 25):
        for key in ("resources", "required", "member_of"):
            properties.pop(key, None)
        out.pop("required")
        suffix = "[a-zA-Z0-9_-]{1,64}" if microversion.at_least(1, 33) else "[1-9][0-9]*"
        keys = _GROUP_KEYS if microversion.at_least(1, 31) else _GROUP_KEYS[:3]
        out["patternProperties"] = {f"^{key}({suffix})?$": {"type": "string"} for key in keys}
        properties["group_policy"] = {"type": "string", "enum": ["none", "isolate"]}
    if microversion.at_least(1, 35):
        properties["root_required"] = {"type": ["string"]}
    if microversion.at_least(1, 36):
        properties["same_subtree"] = {"type": ["string"]}
    return out


def unsuffixed_request(session) -> dict:
    """The request as ``candidates.allocation_candidates`` takes it, plus its filters (400)."""
    query.validate(schema())
    args = flask.request.args
    suffixed = sorted(k for k in args if re.match(r"^(resources|required|member_of|in_tree).",
                                                  k))
    if suffixed or "same_subtree" in args or "root_required" in args:
        raise errors.BadRequest("Request groups with a suffix, same_subtree and "
                                "root_required are not supported: candidates are single "
                                f"providers (got {', '.join(suffixed) or 'same_subtree'})")
    if "resources" not in args:
        raise errors.BadRequest("At least one request group (`resources` or "
                                "`resources{$S}`) is required.")
    resources = candidates.parse_resources(args["resources"])
    unknown = [rc for rc in resources if not catalog.resource_class_exists(session, rc)]
    if unknown:
        raise errors.BadRequest("Invalid resource class in resources parameter: No such "
                                f"resource class {unknown[0]}.")
    required, forbidden = query.required_traits() if "required" in args else ([], set())
    if microversion.at_least(1, 22):
        conflicting = sorted(", ".join(sorted(group)) for group in required
                             if group <= forbidden)
        if conflicting:
            raise errors.BadRequest("Conflicting required and forbidden traits found in the "
                                    "following traits keys: "
                                    + ", ".join(f"required: ({c})" for c in conflicting))
    unknown_traits = catalog.unknown_traits(session, set().union(*required, forbidden))
    if unknown_traits:
        raise errors.BadRequest(f"No such trait(s): {', '.join(unknown_traits)}.")
    aggregates, refused_aggregates = query.member_of()
    in_tree = None
    if "in_tree" in args:
        try:
            in_tree = providers.canonical_uuid(args["in_tree"])
        except errors.BadRequest:
            raise errors.BadRequest("Invalid query string parameters: Expected 'in_tree' "
                                    "parameter to be a format of uuid. Got: "
                                    f"{args['in_tree']}") from None
    limit = int(args["limit"]) if "limit" in args else None
    return {"resources": resources, "required": required, "forbidden": forbidden,
            "aggregates": aggregates, "refused_aggregates": refused_aggregates,
            "in_tree": in_tree, "limit": limit}


def find(session, request: dict) -> dict:
    """Candidates of ``request`` (from :func:`unsuffixed_request`), at most ``limit``."""
    found = tree_candidates.find(
        session, request["resources"], request["required"], request["forbidden"],
        request["aggregates"], request["refused_aggregates"], request["in_tree"],
        nested_aware=microversion.at_least(1, 29))
    if request["limit"] is not None:
        chosen = found["allocation_requests"][:request["limit"]]
        roots = {found["provider_summaries"][rp]["root_provider_uuid"]
                 for r in chosen for rp in r["allocations"]
                 if rp in found["provider_summaries"]}
        found = {"allocation_requests": chosen,
                 "provider_summaries": {u: s for u, s in found["provider_summaries"].items()
                                        if s["root_provider_uuid"] in roots}}
    return found
