"""``POST /reshaper`` (1.30+): move inventories and allocations between providers
atomically, every provider and consumer generation checked."""

from __future__ import annotations

import copy

from fleetflow.api.placement import allocation_schemas, microversion, schemas
from fleetflow.api.placement.allocation_views import consumer_write
from fleetflow.api.placement.blueprint import blp, fence, no_content, service
from fleetflow.api.placement.inventories import PUT_INVENTORIES, checked_inventory
from fleetflow.services.placement import canonical_uuid, errors


class UnknownProvider(errors.BadRequest):
    code = errors.PROVIDER_NOT_FOUND


def _schema() -> dict:
    allocations = copy.deepcopy(allocation_schemas.many_consumers(at_least_1_28=True))
    allocations["minProperties"] = 0
    return {
        "type": "object",
        "properties": {
            "inventories": {"type": "object",
                            "patternProperties": {schemas.UUID_PATTERN: PUT_INVENTORIES},
                            "minProperties": 1, "additionalProperties": False},
            "allocations": allocations,
        },
        "required": ["inventories", "allocations"],
        "additionalProperties": False,
    }


@blp.route("/reshaper", methods=["POST"])
def reshape():
    microversion.require(1, 30)
    data = schemas.json_body(_schema())
    inventories = {}
    for rp_uuid, entry in data["inventories"].items():
        try:
            service().get_provider(rp_uuid)
        except errors.ProviderNotFound as exc:
            raise UnknownProvider(f"Resource provider {rp_uuid} in inventories not found: "
                                  f"{exc.message}") from None
        inventories[canonical_uuid(rp_uuid)] = (
            entry["resource_provider_generation"],
            {rc: checked_inventory(rp_uuid, rc, spec, "update")
             for rc, spec in entry["inventories"].items()})
    writes = [consumer_write(canonical_uuid(consumer, "consumer uuid"), entry)
              for consumer, entry in data["allocations"].items()]
    try:
        service().reshape(inventories, writes, fence())
    except errors.InventoryInUse as exc:
        raise errors.InventoryInUse(f"update conflict: {exc.message}") from None
    return no_content()
