"""Resource providers, their inventories, traits and usages; the trait catalogue."""

from __future__ import annotations

import flask

from fleetflow.api.placement import microversion, query
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
from fleetflow.persistence.placement import candidates, catalog, errors, providers


@blp.route("/", methods=["GET"])
def versions():
    """Placement's version document."""
    return {"versions": [{"id": "v1.0", "status": "CURRENT",
                          "min_version": microversion.as_text(microversion.MIN_VERSION),
                          "max_version": microversion.as_text(microversion.MAX_VERSION),
                          "links": []}]}


@blp.route("/resource_providers", methods=["GET"])
def list_resource_providers():
    query.validate(query.provider_list_schema())
    args = flask.request.args
    aggregates, refused_aggregates = query.member_of()
    traits, refused_traits = query.required_traits() if "required" in args else ([], set())
    resources = candidates.parse_resources(args["resources"]) if "resources" in args else None
    unknown = [rc for rc in resources or ()
               if not store().in_transaction(catalog.resource_class_exists, rc)]
    if unknown:
        raise errors.BadRequest("Invalid resource class in resources parameter: No such "
                                f"resource class {unknown[0]}.")
    store().in_transaction(query.check_traits_exist, traits, refused_traits)
    in_tree = providers.canonical_uuid(args["in_tree"]) if "in_tree" in args else None
    if in_tree and not store().in_transaction(catalog.provider_exists, in_tree):
        return {"resource_providers": []}
    uuid = providers.canonical_uuid(args["uuid"]) if "uuid" in args else None
    found = store().list_providers(name=args.get("name"), uuid=uuid,
                                   in_tree=in_tree, resources=resources)
    keep = store().in_transaction(catalog.filter_providers, [rp["uuid"] for rp in found],
                                  traits, refused_traits, aggregates, refused_aggregates)
    return {"resource_providers": [provider_json(rp) for rp in found if rp["uuid"] in keep]}


@blp.route("/resource_providers", methods=["POST"])
def create_resource_provider():
    data = body(required=("name",), allowed=("uuid", "parent_provider_uuid"))
    name = data["name"]
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise errors.BadRequest("JSON does not validate: name must be 1-200 characters")
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
    current = store().get_provider(uuid)
    parent = data.get("parent_provider_uuid", current["parent_provider_uuid"])
    return provider_json(store().update_provider(uuid, data["name"], parent))


@blp.route("/resource_providers/<uuid>", methods=["DELETE"])
def delete_resource_provider(uuid):
    store().delete_provider(uuid)
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
    unknown = store().in_transaction(catalog.unknown_traits, data["traits"])
    if unknown:
        raise errors.BadRequest(f"No such trait(s): {', '.join(unknown)}.")
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
    associated = args.get("associated")
    if associated is not None and associated not in ("true", "false"):
        raise errors.BadRequest("Invalid query string parameters: 'associated' must be "
                                f"'true' or 'false', got {associated!r}")
    traits = store().in_transaction(catalog.list_traits, None if associated is None
                                    else associated == "true")
    name = args.get("name")
    if name and name.startswith("startswith:"):
        traits = [t for t in traits if t.startswith(name[len("startswith:"):])]
    elif name and name.startswith("in:"):
        wanted = set(name[3:].split(","))
        traits = [t for t in traits if t in wanted]
    elif name:
        raise errors.BadRequest(f"Badly formatted name parameter. Expected name query "
                                f"string parameter in form: ?name=startswith:CUSTOM or "
                                f"?name=in:CUSTOM_A,CUSTOM_B. Got: {name}")
    return {"traits": traits}


@blp.route("/traits/<name>", methods=["GET"])
def show_trait(name):
    microversion.require(1, 6)
    if not store().in_transaction(catalog.trait_exists, name):
        raise catalog.CatalogNotFound(f"No such trait(s): {name}.")
    return no_content()


@blp.route("/traits/<name>", methods=["PUT"])
def create_trait(name):
    microversion.require(1, 6)
    if not name.startswith("CUSTOM_") or not providers.NAME_PATTERN.match(name):
        raise errors.BadRequest("The trait is invalid. A valid trait must be no longer "
                                "than 255 characters, start with the prefix \"CUSTOM_\" "
                                "and use following characters: \"A\"-\"Z\", \"0\"-\"9\" "
                                "and \"_\"")
    existed = store().in_transaction(catalog.trait_exists, name)
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
