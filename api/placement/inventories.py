"""``/resource_providers/{uuid}/inventories``, as Placement's inventory handler.

Bodies are checked (schema, resource class, capacity: 400) before the provider
generation (409), so a malformed request never reads as a conflict.
"""

from __future__ import annotations

import copy

import flask

from fleetflow.api.placement import microversion, schemas
from fleetflow.api.placement.blueprint import base_url, blp, fence, no_content, service
from fleetflow.services.placement import INVENTORY_DEFAULTS, INVENTORY_FIELDS, errors

OUTPUT_FIELDS = INVENTORY_FIELDS
_RECORD = {"type": "object", "properties": copy.deepcopy(schemas.INVENTORY_FIELDS),
           "required": ["total"], "additionalProperties": False}
ONE_INVENTORY = dict(copy.deepcopy(_RECORD),
                     required=["total", "resource_provider_generation"])
POST_INVENTORY = copy.deepcopy(_RECORD)
POST_INVENTORY["properties"]["resource_class"] = {"type": "string",
                                                  "pattern": schemas.RC_PATTERN}
POST_INVENTORY["required"] = ["total", "resource_class"]
PUT_INVENTORIES = {
    "type": "object",
    "properties": {"resource_provider_generation": {"type": "integer"},
                   # NOTE: a key that is no resource class name is refused here, not
                   # looked up as one with a body that was never checked.
                   "inventories": {"type": "object",
                                   "patternProperties": {schemas.RC_PATTERN: _RECORD},
                                   "additionalProperties": False}},
    "required": ["resource_provider_generation", "inventories"],
    "additionalProperties": False,
}


class InventoryConflict(errors.PlacementConflict):
    code = errors.CONCURRENT_UPDATE


def checked_inventory(uuid: str, resource_class: str, data: dict, action: str) -> dict:
    """One inventory with Placement's defaults, its class and capacity checked (400)."""
    inv = dict(INVENTORY_DEFAULTS, **{f: data[f] for f in OUTPUT_FIELDS if f in data})
    if not service().resource_class_exists(resource_class):
        raise errors.BadRequest(f"Unknown resource class in inventory for resource provider "
                                f"{uuid}: No such resource class {resource_class}."
                                if action == "update" else
                                f"Unable to create inventory for resource provider {uuid}: "
                                f"No such resource class {resource_class}.")
    capacity = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
    reserved_can_be_total = microversion.at_least(1, 26)
    if capacity < 0 or (capacity == 0 and not reserved_can_be_total):
        than = "greater than" if reserved_can_be_total else "greater than or equal to"
        raise errors.BadRequest(
            f"Unable to {action} inventory for resource provider {uuid}: Invalid inventory "
            f"for '{resource_class}' on resource provider '{uuid}'. The reserved value is "
            f"{than} total.")
    return inv


def _write(uuid: str, generation: int, inventories: dict) -> tuple[int, dict]:
    try:
        return service().set_inventories(uuid, generation, inventories, fence())
    except errors.InventoryInUse as exc:
        raise errors.InventoryInUse(f"update conflict: {exc.message}") from None


def _one_json(inv: dict, generation: int) -> dict:
    return dict({f: inv[f] for f in OUTPUT_FIELDS}, resource_provider_generation=generation)


@blp.route("/resource_providers/<uuid>/inventories", methods=["GET"])
def list_inventories(uuid):
    generation, inventories = service().get_inventories(uuid)
    return {"resource_provider_generation": generation, "inventories": inventories}


@blp.route("/resource_providers/<uuid>/inventories", methods=["PUT"])
def set_inventories(uuid):
    service().get_provider(uuid)
    data = schemas.json_body(PUT_INVENTORIES)
    wanted = {rc: checked_inventory(uuid, rc, spec, "update")
              for rc, spec in data["inventories"].items()}
    generation, result = _write(uuid, data["resource_provider_generation"], wanted)
    return {"resource_provider_generation": generation, "inventories": result}


@blp.route("/resource_providers/<uuid>/inventories", methods=["POST"])
def create_inventory(uuid):
    generation, inventories = service().get_inventories(uuid)
    data = schemas.json_body(POST_INVENTORY)
    resource_class = data["resource_class"]
    inv = checked_inventory(uuid, resource_class, data, "create")
    if resource_class in inventories:
        raise InventoryConflict(f"Update conflict: inventory of {resource_class} already "
                                f"exists on resource provider {uuid}")
    inventories[resource_class] = inv
    new_generation, result = _write(uuid, generation, inventories)
    response = flask.jsonify(_one_json(result[resource_class], new_generation))
    response.status_code = 201
    response.headers["Location"] = (f"{base_url()}/resource_providers/{uuid}/inventories/"
                                    f"{resource_class}")
    return response


@blp.route("/resource_providers/<uuid>/inventories", methods=["DELETE"])
def delete_inventories(uuid):
    microversion.require(1, 5, status=405)
    generation, _ = service().get_inventories(uuid)
    _write(uuid, generation, {})
    return no_content()


@blp.route("/resource_providers/<uuid>/inventories/<resource_class>", methods=["GET"])
def show_inventory(uuid, resource_class):
    generation, inventories = service().get_inventories(uuid)
    if resource_class not in inventories:
        raise errors.NotFound(f"No inventory of class {resource_class} for {uuid}")
    return _one_json(inventories[resource_class], generation)


@blp.route("/resource_providers/<uuid>/inventories/<resource_class>", methods=["PUT"])
def update_inventory(uuid, resource_class):
    service().get_provider(uuid)
    data = schemas.json_body(ONE_INVENTORY)
    inv = checked_inventory(uuid, resource_class, data, "update")
    generation, inventories = service().get_inventories(uuid)
    if data["resource_provider_generation"] != generation:
        raise InventoryConflict("resource provider generation conflict")
    if resource_class not in inventories:
        raise errors.BadRequest(f"No inventory record with resource class for resource "
                                f"provider {uuid}: No inventory of class {resource_class} "
                                f"found for {uuid}.")
    inventories[resource_class] = inv
    new_generation, result = _write(uuid, generation, inventories)
    return _one_json(result[resource_class], new_generation)


@blp.route("/resource_providers/<uuid>/inventories/<resource_class>", methods=["DELETE"])
def delete_inventory(uuid, resource_class):
    generation, inventories = service().get_inventories(uuid)
    if resource_class not in inventories:
        raise errors.NotFound(f"No inventory of class {resource_class} found for delete: "
                              f"No inventory of {resource_class} on resource provider {uuid}.")
    del inventories[resource_class]
    try:
        _write(uuid, generation, inventories)
    except errors.InventoryInUse as exc:
        raise InventoryConflict(f"Unable to delete inventory of class {resource_class}: "
                                f"{exc.message}") from None
    return no_content()
