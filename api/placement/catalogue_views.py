"""Placement routes beside the provider views: one inventory created with POST,
a custom trait deleted."""

from __future__ import annotations

import flask

from fleetflow.api.placement import microversion, schemas
from fleetflow.api.placement.blueprint import base_url, blp, fence, no_content, store
from fleetflow.persistence.placement import catalog, errors


class InventoryExists(errors.PlacementConflict):
    code = errors.CONCURRENT_UPDATE


def check_resource_classes(uuid: str, names) -> None:
    """400 for an inventory of a class Placement does not know (standard or custom)."""
    unknown = [n for n in names if not store().in_transaction(catalog.resource_class_exists, n)]
    if unknown:
        raise errors.BadRequest(f"Unknown resource class in inventory for resource provider "
                                f"{uuid}: {unknown[0]}")


@blp.route("/resource_providers/<uuid>/inventories", methods=["POST"])
def create_inventory(uuid):
    generation, inventories = store().get_inventories(uuid)
    data = schemas.json_body(schemas.POST_INVENTORY)
    resource_class = data.pop("resource_class")
    data.pop("resource_provider_generation", None)
    check_resource_classes(uuid, [resource_class])
    if resource_class in inventories:
        raise InventoryExists(f"Update conflict: inventory of {resource_class} already "
                              f"exists on resource provider {uuid}")
    inventories[resource_class] = data
    new_generation, result = store().set_inventories(uuid, generation, inventories, fence())
    response = flask.jsonify(dict(result[resource_class],
                                  resource_provider_generation=new_generation))
    response.status_code = 201
    response.headers["Location"] = (f"{base_url()}/resource_providers/{uuid}/inventories/"
                                    f"{resource_class}")
    return response


@blp.route("/traits/<name>", methods=["DELETE"])
def delete_trait(name):
    microversion.require(1, 6)
    store().in_transaction(catalog.delete_trait, name)
    return no_content()
