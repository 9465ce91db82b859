"""``GET /allocation_candidates`` query parameters, as Placement validates them.

Request groups (the unsuffixed one, suffixed ones from 1.25), ``group_policy``,
``root_required`` (1.35) and ``same_subtree`` (1.36) are parsed and checked with
Placement's wording; the placement service (services/placement.py) searches them.
"""

from __future__ import annotations

import re

import flask

from fleetflow.api.placement import microversion, query
from fleetflow.services.placement import canonical_uuid, errors

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


class BadValue(errors.BadRequest):
    code = "placement.query.bad_value"


class MissingValue(errors.BadRequest):
    code = "placement.query.missing_value"


class DuplicateKey(errors.BadRequest):
    code = "placement.query.duplicate_key"


def _group(catalog, suffix: str) -> dict:
    """One request group: its resources, traits, aggregates and tree (400 when malformed);
    ``catalog`` (the service's CatalogReader) knows which resource classes exist."""
    args = flask.request.args
    group: dict = {"resources": {}, "required": [], "forbidden": set(), "aggregates": [],
                   "refused_aggregates": set(), "in_tree": None}
    if "resources" + suffix in args:
        group["resources"] = query.parse_resources(args["resources" + suffix])
        unknown = [rc for rc in group["resources"]
                   if not catalog.resource_class_exists(rc)]
        if unknown:
            raise errors.BadRequest("Invalid resource class in resources parameter: No "
                                    f"such resource class {unknown[0]}.")
    if "required" + suffix in args:
        group["required"], group["forbidden"] = query.required_traits(suffix)
    group["aggregates"], group["refused_aggregates"] = query.member_of(suffix)
    if "in_tree" + suffix in args:
        value = args["in_tree" + suffix]
        try:
            group["in_tree"] = canonical_uuid(value)
        except errors.BadRequest:
            raise errors.BadRequest("Invalid query string parameters: Expected 'in_tree' "
                                    f"parameter to be a format of uuid. Got: {value}") from None
    return group


def _check_groups(groups: dict, same_subtrees: list[set[str]]) -> None:
    """Placement's rules on which groups may go without resources."""
    resourceless = {s for s, g in groups.items() if not g["resources"]}
    if microversion.at_least(1, 36):
        if len(resourceless) == len(groups):
            raise MissingValue("There must be at least one resources or resources[$S] "
                                    "parameter.")
        listed = set().union(*same_subtrees)
        bad = [s for s in sorted(resourceless) if s not in listed]
        if bad:
            raise BadValue("Resourceless suffixed group request should be specified "
                                    f"in `same_subtree` query param: bad group(s) - {bad}.")
        unknown = [s for s in sorted(listed) if s not in groups]
        if unknown:
            raise BadValue(f"Real suffixes should be specified in `same_subtree`: "
                                    f"{unknown} not found in {list(groups)}.")
        return
    orphans = sorted("required" + s for s, g in groups.items()
                     if g["required"] and not g["resources"])
    if orphans:
        raise errors.BadRequest("All traits parameters must be associated with resources.  "
                                "Found the following orphaned traits keys: "
                                + ", ".join(orphans))
    orphans = sorted("member_of" + s for s, g in groups.items() if not g["resources"]
                     and (g["aggregates"] or g["refused_aggregates"]))
    if orphans:
        raise errors.BadRequest("All member_of parameters must be associated with resources. "
                                "Found the following orphaned member_of keys: "
                                + ", ".join(orphans))
    if resourceless:
        raise errors.BadRequest("All request groups must specify resources.")
    if not groups:
        raise errors.BadRequest("At least one request group (`resources` or "
                                "`resources{$S}`) is required.")


def parse(catalog) -> dict:
    """The whole request: its groups by suffix and the request-wide parameters (400),
    its names checked against ``catalog`` (the service's CatalogReader)."""
    query.validate(schema())
    args = flask.request.args
    pattern = r"^(resources|required|member_of|in_tree)(.*)$"
    suffixes = list(dict.fromkeys(re.match(pattern, k).group(2) for k in args
                                  if re.match(pattern, k)))
    same_subtrees = []
    for value in args.getlist("same_subtree"):
        listed = {part.strip() for part in value.split(",")}
        if "" in listed:
            raise BadValue("Empty string (unsuffixed group) can not be specified in "
                                    "`same_subtree` ")
        same_subtrees.append(listed)
    groups = {suffix: _group(catalog, suffix) for suffix in suffixes}
    _check_groups(groups, same_subtrees)
    if microversion.at_least(1, 22):
        conflicting = sorted(f"required{s}: ({', '.join(sorted(g))})"
                             for s, group in groups.items() for g in group["required"]
                             if g <= group["forbidden"])
        if conflicting:
            raise errors.BadRequest("Conflicting required and forbidden traits found in the "
                                    "following traits keys: " + ", ".join(conflicting))
    named = set()
    for group in groups.values():
        named |= set().union(*group["required"], group["forbidden"])
    root_required, root_forbidden = [], set()
    values = args.getlist("root_required")
    if len(values) > 1:
        raise DuplicateKey("Query parameter 'root_required' may be specified only once.")
    if values:
        names = [t.strip() for t in values[0].split(",")]
        wanted = {t for t in names if not t.startswith("!")}
        root_forbidden = {t[1:] for t in names if t.startswith("!")}
        if wanted & root_forbidden:
            raise BadValue("Conflicting required and forbidden traits found in "
                           f"root_required: {', '.join(sorted(wanted & root_forbidden))}")
        root_required = [{t} for t in sorted(wanted)]
        named |= wanted | root_forbidden
    unknown_traits = catalog.unknown_traits(named)
    if unknown_traits:
        raise errors.BadRequest(f"No such trait(s): {', '.join(unknown_traits)}.")
    policy = args.get("group_policy")
    if not policy and sum(1 for s, g in groups.items() if s and g["resources"]) > 1:
        raise errors.BadRequest('The "group_policy" parameter is required when specifying '
                                'more than one "resources{N}" parameter.')
    return {"groups": groups, "group_policy": policy or "none",
            "root_required": root_required, "root_forbidden": root_forbidden,
            "same_subtrees": same_subtrees,
            "limit": int(args["limit"]) if "limit" in args else None}


def limited(found: dict, request: dict) -> dict:
    """The candidates ``found`` for ``request`` (from :func:`parse`), at most its
    ``limit``, with the summaries of the providers they use."""
    if request["limit"] is not None:
        chosen = found["allocation_requests"][:request["limit"]]
        roots = {found["provider_summaries"][rp]["root_provider_uuid"]
                 for r in chosen for rp in r["allocations"]
                 if rp in found["provider_summaries"]}
        found = {"allocation_requests": chosen,
                 "provider_summaries": {u: s for u, s in found["provider_summaries"].items()
                                        if s["root_provider_uuid"] in roots}}
    return found
