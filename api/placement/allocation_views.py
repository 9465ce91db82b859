"""Allocations (per consumer, per provider, many at once) and allocation candidates.

Request bodies follow Placement's schemas by microversion: 1.12+ dict-shaped
allocations, 1.28+ a required ``consumer_generation`` (``null`` for a new
consumer), 1.34+ optional ``mappings`` (accepted, not stored), 1.38+ a
required ``consumer_type``; list-shaped bodies before 1.12 (without project and user
before 1.8). See :mod:`.allocation_schemas`.
"""

from __future__ import annotations

import json

import flask

from fleetflow.api.placement import allocation_schemas, candidate_query, microversion, schemas
from fleetflow.api.placement.blueprint import blp, fence, no_content, service
from fleetflow.services.placement import ANY_GENERATION, ConsumerWrite, canonical_uuid


def consumer_write(consumer_uuid: str, data: dict) -> ConsumerWrite:
    """One consumer's validated body -> ConsumerWrite."""
    allocations = allocation_schemas.as_dict_shaped(data)
    plain = {rp: entry["resources"] for rp, entry in allocations.items()}
    generation = data.get("consumer_generation") if microversion.at_least(1, 28) \
        else ANY_GENERATION
    return ConsumerWrite(consumer_uuid, plain,
                         data.get("project_id", allocation_schemas.INCOMPLETE_CONSUMER_ID),
                         data.get("user_id", allocation_schemas.INCOMPLETE_CONSUMER_ID),
                         generation, data.get("consumer_type"))


@blp.route("/allocations/<consumer_uuid>", methods=["GET"])
def show_allocations(consumer_uuid):
    found = service().get_allocations(consumer_uuid)
    out = {"allocations": found["allocations"]}
    if found["allocations"] and microversion.at_least(1, 12):
        out["project_id"] = found["project_id"]
        out["user_id"] = found["user_id"]
        if microversion.at_least(1, 28):
            out["consumer_generation"] = found["consumer_generation"]
        if microversion.at_least(1, 38):
            out["consumer_type"] = found["consumer_type"]
    return out


@blp.route("/allocations/<consumer_uuid>", methods=["PUT"])
def set_allocations(consumer_uuid):
    data = schemas.json_body(allocation_schemas.one_consumer())
    consumer_uuid = canonical_uuid(consumer_uuid, "consumer_uuid")
    service().set_allocations([consumer_write(consumer_uuid, data)], fence())
    return no_content()


@blp.route("/allocations", methods=["POST"])
def set_many_allocations():
    microversion.require(1, 13)
    data = schemas.json_body(allocation_schemas.many_consumers())
    writes = [consumer_write(canonical_uuid(consumer_uuid, "consumer uuid"), entry)
              for consumer_uuid, entry in data.items()]
    service().set_allocations(writes, fence())
    return no_content()


@blp.route("/allocations/<consumer_uuid>", methods=["DELETE"])
def delete_allocations(consumer_uuid):
    service().delete_allocations(consumer_uuid, fence())
    return no_content()


@blp.route("/resource_providers/<uuid>/allocations", methods=["GET"])
def provider_allocations(uuid):
    generation, found = service().provider_allocations(uuid)
    if not microversion.at_least(1, 28):
        for entry in found.values():
            entry.pop("consumer_generation", None)
    return {"resource_provider_generation": generation, "allocations": found}


@blp.route("/allocation_candidates", methods=["GET"])
def allocation_candidates():
    microversion.require(1, 10)
    request, found, world = service().allocation_candidates(
        candidate_query.parse, nested_aware=microversion.at_least(1, 29))
    requested = {rc for group in request["groups"].values() for rc in group["resources"]}
    return _candidates_json(candidate_query.limited(found, request), requested, world)


def _candidates_json(found: dict, requested: set[str], world) -> flask.Response:
    """The body at the request's version. Summaries are the snapshot's (``world``'s)
    own, shared between requests: only copies of them are trimmed for older versions,
    and from 1.29 each is encoded once per snapshot."""
    version = microversion.current()
    if version >= (1, 12):
        requests = _requests_json(found["allocation_requests"], version >= (1, 34))
    else:
        requests = [{"allocations": [{"resource_provider": {"uuid": rp},
                                      "resources": entry["resources"]}
                                     for rp, entry in r["allocations"].items()]}
                    for r in found["allocation_requests"]]
    summaries = found["provider_summaries"]
    if version < (1, 12):
        requests = json.dumps(requests, separators=(",", ":"))
    if version < (1, 29):
        body = "".join(('{"allocation_requests":', requests, ',"provider_summaries":',
                        json.dumps({rp: _older_summary(summary, version, requested)
                                    for rp, summary in summaries.items()},
                                   separators=(",", ":")), "}"))
    else:
        body = "".join(('{"allocation_requests":', requests, ',"provider_summaries":{',
                        ",".join(f'"{rp}":{world.summary_json(rp)}' for rp in summaries),
                        "}}"))
    return flask.Response(body, mimetype="application/json")


def _requests_json(requests: list[dict], with_mappings: bool) -> str:
    """The dict-shaped (1.12+) allocation requests as JSON text.

    Provider uuids are canonical (hex and dashes), so they go in as they are; an
    allocation entry that many requests share (the direct search path's) is encoded
    once, and so is the text around a one-provider request's uuid. Mappings from 1.34;
    a request without its own maps every provider to the unsuffixed group.
    """
    encoded: dict[int, str] = {}
    around: dict[tuple[int, str], list[str]] = {}
    items = []
    for request in requests:
        allocations = request["allocations"]
        mappings = request.get("mappings")
        if len(allocations) == 1 and (not with_mappings or not mappings or len(mappings) == 1):
            # The usual request: one provider, and (from 1.34) one group mapped to it.
            ((rp, entry),) = allocations.items()
            suffix, used = next(iter(mappings.items())) if with_mappings and mappings \
                else ("", None)
            if used is None or used == [rp]:
                parts = around.get((id(entry), suffix))
                if parts is None:
                    parts = around[(id(entry), suffix)] = _one_provider_parts(
                        _encoded(encoded, entry), suffix, with_mappings)
                items.append(rp.join(parts))
                continue
        mappings = mappings or {"": sorted(allocations)}
        parts = [f'"{rp}":{_encoded(encoded, entry)}' for rp, entry in allocations.items()]
        item = '{"allocations":{' + ",".join(parts) + "}"
        if with_mappings:
            item += ',"mappings":{' + ",".join(
                json.dumps(suffix) + ":[" + ",".join(f'"{rp}"' for rp in rps) + "]"
                for suffix, rps in mappings.items()) + "}"
        items.append(item + "}")
    return "[" + ",".join(items) + "]"


def _encoded(encoded: dict[int, str], entry: dict) -> str:
    """``entry`` as JSON, once per object (``encoded`` keeps the texts by id)."""
    text = encoded.get(id(entry))
    if text is None:
        text = encoded[id(entry)] = json.dumps(entry, separators=(",", ":"))
    return text


def _one_provider_parts(entry_text: str, suffix: str, with_mappings: bool) -> list[str]:
    """A one-provider request's text around its provider's uuid (which goes between
    the parts: in the allocations, and from 1.34 in the mappings too)."""
    if not with_mappings:
        return ['{"allocations":{"', '":' + entry_text + "}}"]
    return ['{"allocations":{"', '":' + entry_text + '},"mappings":{' + json.dumps(suffix)
            + ':["', '"]}}']


def _older_summary(summary: dict, version: tuple[int, int], requested: set[str]) -> dict:
    # Every class of the provider from 1.27; before, only the requested ones.
    out = {"resources": summary["resources"] if version >= (1, 27) else {
        rc: usage for rc, usage in summary["resources"].items() if rc in requested}}
    if version >= (1, 17):
        out["traits"] = summary["traits"]
    return out
