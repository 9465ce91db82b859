"""``/resource_providers/{uuid}/aggregates`` (1.1+; with the provider generation from 1.19)."""

from __future__ import annotations

from fleetflow.api.placement import microversion, schemas
from fleetflow.api.placement.blueprint import blp, service


def _aggregates_json(generation: int, aggregates: list[str]) -> dict:
    out = {"aggregates": aggregates}
    if microversion.at_least(1, 19):
        out["resource_provider_generation"] = generation
    return out


@blp.route("/resource_providers/<uuid>/aggregates", methods=["GET"])
def list_provider_aggregates(uuid):
    microversion.require(1, 1)
    return _aggregates_json(*service().get_aggregates(uuid))


@blp.route("/resource_providers/<uuid>/aggregates", methods=["PUT"])
def set_provider_aggregates(uuid):
    microversion.require(1, 1)
    service().get_provider(uuid)  # 404 before a schema error, as Placement
    if microversion.at_least(1, 19):
        data = schemas.json_body(schemas.AGGREGATES_1_19)
        aggregates, generation = data["aggregates"], data["resource_provider_generation"]
    else:
        aggregates, generation = schemas.json_body(schemas.AGGREGATES_1_1), None
    return _aggregates_json(*service().set_aggregates(uuid, aggregates, generation))
