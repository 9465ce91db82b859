"""Resource providers, their inventories, traits and usages; the trait catalogue."""

from __future__ import annotations

import flask

from fleetflow.api.placement import microversion
from fleetflow.api.placement.blueprint import (
    blp,
    body,
    fence,
    integer,
    no_content,
    provider_json,
    query_args,
    store,
)
from fleetflow.persistence.placement import candidates, errors, providers


@blp.route("/", methods=["GET"])
def versions():
    """Placement's version document."""
    return {"versions": [{"id": "v1.0", "status": "CURRENT",
                          "min_version": microversion.as_text(microversion.MIN_VERSION),
                          "max_version": microversion.as_text(microversion.MAX_VERSION),
                          "links": []}]}


@blp.route("/resource_providers", methods=["GET"])
def list_resource_providers():
    args = query_args(("name", "uuid", "member_of", "resources", "in_tree", "required"))
    if "member_of" in args:
        # NOTE: we keep no aggregates, so no provider is a member of any.
        return {"resource_providers": []}
    resources = candidates.parse_resources(args["resources"]) if "resources" in args else None
    uuid = providers.canonical_uuid(args["uuid"]) if "uuid" in args else None
    in_tree = providers.canonical_uuid(args["in_tree"]) if "in_tree" in args else None
    found = store().list_providers(name=args.get("name"), uuid=uuid, in_tree=in_tree,
                                   resources=resources, required=args.getlist("required"))
    return {"resource_providers": [provider_json(rp) for rp in found]}


def _check_provider_body(data: dict) -> None:
    """400 for a name or uuid of the wrong JSON type (the store expects strings)."""
    name = data["name"]
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise errors.BadRequest("JSON does not validate: name must be 1-200 characters")
    for key in ("uuid", "parent_provider_uuid"):
        if not isinstance(data.get(key), str | None):
            raise errors.BadRequest(f"JSON does not validate: {key} must be a uuid string "
                                    "or null")


@blp.route("/resource_providers", methods=["POST"])
def create_resource_provider():
    data = body(required=("name",), allowed=("uuid", "parent_provider_uuid"))
    _check_provider_body(data)
    name = data["name"]
    rp = store().create_provider(name, data.get("uuid"), data.get("parent_provider_uuid"))
    if microversion.at_least(1, 20):
        return provider_json(rp), 200
    response = no_content()
    response.status_code = 201
    response.headers["Location"] = provider_json(rp)["links"][0]["href"]
    return response


@blp.route("/resource_providers/<uuid>", methods=["GET"])
def show_resource_provider(uuid):
    return provider_json(store().get_provider(uuid))


@blp.route("/resource_providers/<uuid>", methods=["PUT"])
def update_resource_provider(uuid):
    data = body(required=("name",), allowed=("parent_provider_uuid",))
    _check_provider_body(data)
    current = store().get_provider(uuid)
    parent = data.get("parent_provider_uuid", current["parent_provider_uuid"])
    return provider_json(store().update_provider(uuid, data["name"], parent))


@blp.route("/resource_providers/<uuid>", methods=["DELETE"])
def delete_resource_provider(uuid):
    store().delete_provider(uuid)
    return no_content()


def _inventories_json(generation: int, inventories: dict) -> dict:
    return {"resource_provider_generation": generation, "inventories": inventories}


@blp.route("/resource_providers/<uuid>/inventories", methods=["GET"])
def list_inventories(uuid):
    return _inventories_json(*store().get_inventories(uuid))


@blp.route("/resource_providers/<uuid>/inventories", methods=["PUT"])
def set_inventories(uuid):
    data = body(required=("resource_provider_generation", "inventories"))
    generation = integer(data["resource_provider_generation"], "resource_provider_generation")
    if not isinstance(data["inventories"], dict):
        raise errors.BadRequest("JSON does not validate: inventories must be an object")
    return _inventories_json(*store().set_inventories(uuid, generation, data["inventories"],
                                                      fence()))


@blp.route("/resource_providers/<uuid>/inventories", methods=["DELETE"])
def delete_inventories(uuid):
    microversion.require(1, 5)
    generation, _ = store().get_inventories(uuid)
    store().set_inventories(uuid, generation, {}, fence())
    return no_content()


@blp.route("/resource_providers/<uuid>/inventories/<resource_class>", methods=["GET"])
def show_inventory(uuid, resource_class):
    generation, inventories = store().get_inventories(uuid)
    if resource_class not in inventories:
        raise errors.NotFound(f"No inventory of class {resource_class} for {uuid}")
    return dict(inventories[resource_class], resource_provider_generation=generation)


@blp.route("/resource_providers/<uuid>/inventories/<resource_class>", methods=["PUT"])
def set_inventory(uuid, resource_class):
    data = body(required=("resource_provider_generation", "total"),
                allowed=providers.INVENTORY_FIELDS)
    generation = integer(data.pop("resource_provider_generation"),
                         "resource_provider_generation")
    _, inventories = store().get_inventories(uuid)
    inventories[resource_class] = data
    new_generation, result = store().set_inventories(uuid, generation, inventories, fence())
    return dict(result[resource_class], resource_provider_generation=new_generation)


@blp.route("/resource_providers/<uuid>/inventories/<resource_class>", methods=["DELETE"])
def delete_inventory(uuid, resource_class):
    generation, inventories = store().get_inventories(uuid)
    if resource_class not in inventories:
        raise errors.NotFound(f"No inventory of class {resource_class} for {uuid}")
    del inventories[resource_class]
    store().set_inventories(uuid, generation, inventories, fence())
    return no_content()


@blp.route("/resource_providers/<uuid>/traits", methods=["GET"])
def list_provider_traits(uuid):
    microversion.require(1, 6)
    generation, traits = store().get_traits(uuid)
    return {"traits": traits, "resource_provider_generation": generation}


@blp.route("/resource_providers/<uuid>/traits", methods=["PUT"])
def set_provider_traits(uuid):
    microversion.require(1, 6)
    data = body(required=("traits", "resource_provider_generation"))
    generation = integer(data["resource_provider_generation"], "resource_provider_generation")
    if not isinstance(data["traits"], list) or not all(isinstance(t, str)
                                                       for t in data["traits"]):
        raise errors.BadRequest("JSON does not validate: traits must be a list of names")
    generation, traits = store().set_traits(uuid, generation, data["traits"], fence())
    return {"traits": traits, "resource_provider_generation": generation}


@blp.route("/resource_providers/<uuid>/traits", methods=["DELETE"])
def delete_provider_traits(uuid):
    microversion.require(1, 6)
    generation, _ = store().get_traits(uuid)
    store().set_traits(uuid, generation, [], fence())
    return no_content()


@blp.route("/traits", methods=["GET"])
def list_traits():
    microversion.require(1, 6)
    args = query_args(("name", "associated"))
    traits = store().list_traits()
    name = args.get("name")
    if name and name.startswith("startswith:"):
        traits = [t for t in traits if t.startswith(name[len("startswith:"):])]
    elif name and name.startswith("in:"):
        wanted = set(name[3:].split(","))
        traits = [t for t in traits if t in wanted]
    return {"traits": traits}


@blp.route("/traits/<name>", methods=["GET"])
def show_trait(name):
    microversion.require(1, 6)
    if name not in store().list_traits():
        raise errors.NotFound(f"No such trait {name}")
    return no_content()


@blp.route("/traits/<name>", methods=["PUT"])
def create_trait(name):
    microversion.require(1, 6)
    if not name.startswith("CUSTOM_") or not providers.NAME_PATTERN.match(name):
        raise errors.BadRequest("The trait is invalid. A valid trait must be no longer "
                                "than 255 characters, start with the prefix \"CUSTOM_\" "
                                "and use following characters: \"A\"-\"Z\", \"0\"-\"9\" "
                                "and \"_\"")
    existed = name in store().list_traits()
    store().ensure_traits([name])
    response = no_content()
    if not existed:
        response.status_code = 201
        response.headers["Location"] = flask.request.path
    return response


@blp.route("/resource_providers/<uuid>/usages", methods=["GET"])
def provider_usages(uuid):
    generation, usages = store().provider_usages(uuid)
    return {"resource_provider_generation": generation, "usages": usages}


@blp.route("/usages", methods=["GET"])
def project_usages():
    microversion.require(1, 9)
    allowed = ("project_id", "user_id") + (("consumer_type",)
                                           if microversion.at_least(1, 38) else ())
    args = query_args(allowed)
    if not args.get("project_id"):
        raise errors.BadRequest("Invalid query string parameters: 'project_id' is a "
                                "required property")
    wanted_type = args.get("consumer_type")
    grouped = store().project_usages(args["project_id"], args.get("user_id"),
                                     None if wanted_type in (None, "all") else wanted_type)
    if not microversion.at_least(1, 38):
        totals: dict[str, int] = {}
        for usage in grouped.values():
            for rc, used in usage.items():
                if rc != "consumer_count":
                    totals[rc] = totals.get(rc, 0) + used
        return {"usages": totals}
    if wanted_type == "all":
        merged: dict[str, int] = {}
        for usage in grouped.values():
            for key, value in usage.items():
                merged[key] = merged.get(key, 0) + value
        return {"usages": {"all": merged} if merged else {}}
    return {"usages": grouped}
