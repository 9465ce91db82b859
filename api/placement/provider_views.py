"""Resource providers and usages (inventories, traits and aggregates have modules of their own)."""

from __future__ import annotations

import flask

from fleetflow.api.placement import microversion, query, schemas
from fleetflow.api.placement.blueprint import blp, no_content, provider_json, service
from fleetflow.services.placement import canonical_uuid, errors


@blp.route("/", methods=["GET"])
def versions():
    """Placement's version document."""
    return {"versions": [{"id": "v1.0", "status": "CURRENT",
                          "min_version": microversion.as_text(microversion.MIN_VERSION),
                          "max_version": microversion.as_text(microversion.MAX_VERSION),
                          "links": [{"rel": "self", "href": ""}]}]}


@blp.route("/resource_providers", methods=["GET"])
def list_resource_providers():
    query.validate(query.provider_list_schema())
    args = flask.request.args
    aggregates, refused_aggregates = query.member_of()
    traits, refused_traits = query.required_traits() if "required" in args else ([], set())
    resources = query.parse_resources(args["resources"]) if "resources" in args else None
    unknown = [rc for rc in resources or ()
               if not service().resource_class_exists(rc)]
    if unknown:
        raise errors.BadRequest("Invalid resource class in resources parameter: No such "
                                f"resource class {unknown[0]}.")
    query.check_traits_exist(traits, refused_traits)
    in_tree = canonical_uuid(args["in_tree"]) if "in_tree" in args else None
    if in_tree and not service().provider_exists(in_tree):
        return {"resource_providers": []}
    uuid = canonical_uuid(args["uuid"]) if "uuid" in args else None
    found = service().list_providers(name=args.get("name"), uuid=uuid,
                                     in_tree=in_tree, resources=resources)
    keep = service().filter_providers([rp["uuid"] for rp in found], traits, refused_traits,
                                      aggregates, refused_aggregates)
    return {"resource_providers": [provider_json(rp) for rp in found if rp["uuid"] in keep]}


def _provider_schema(with_uuid: bool) -> dict:
    properties = {"name": {"type": "string", "maxLength": 200}}
    if with_uuid:
        properties["uuid"] = {"type": "string", "format": "uuid"}
    if microversion.at_least(1, 14):
        properties["parent_provider_uuid"] = {
            "anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]}
    return {"type": "object", "properties": properties, "required": ["name"],
            "additionalProperties": False}


@blp.route("/resource_providers", methods=["POST"])
def create_resource_provider():
    data = schemas.json_body(_provider_schema(with_uuid=True))
    parent = data.get("parent_provider_uuid")
    rp = service().create_provider(data["name"], data.get("uuid"),
                                   canonical_uuid(parent) if parent else None)
    location = provider_json(rp)["links"][0]["href"]
    if microversion.at_least(1, 20):
        response = flask.jsonify(provider_json(rp))
    else:
        response = no_content()
        response.status_code = 201
    response.headers["Location"] = location
    return response


@blp.route("/resource_providers/<uuid>", methods=["GET"])
def show_resource_provider(uuid):
    return provider_json(service().get_provider(uuid))


@blp.route("/resource_providers/<uuid>", methods=["PUT"])
def update_resource_provider(uuid):
    current = service().get_provider(uuid)
    data = schemas.json_body(_provider_schema(with_uuid=False))
    parent = data.get("parent_provider_uuid", current["parent_provider_uuid"])
    return provider_json(service().update_provider(
        uuid, data["name"], canonical_uuid(parent) if parent else None,
        allow_reparenting=microversion.at_least(1, 37)))


@blp.route("/resource_providers/<uuid>", methods=["DELETE"])
def delete_resource_provider(uuid):
    try:
        service().delete_provider(uuid)
    except errors.ProviderNotFound as exc:
        raise errors.ProviderNotFound(f"{exc.message} for delete") from None
    return no_content()


@blp.route("/resource_providers/<uuid>/usages", methods=["GET"])
def provider_usages(uuid):
    generation, usages = service().provider_usages(uuid)
    return {"resource_provider_generation": generation, "usages": usages}


@blp.route("/usages", methods=["GET"])
def project_usages():
    microversion.require(1, 9)
    owner = {"type": "string", "minLength": 1, "maxLength": 255}
    properties = {"project_id": owner, "user_id": owner}
    if microversion.at_least(1, 38):
        properties["consumer_type"] = dict(owner, pattern="^[A-Z0-9_]+$|^all|^unknown$")
    query.validate({"type": "object", "properties": properties, "required": ["project_id"],
                    "additionalProperties": False})
    args = flask.request.args
    wanted_type = args.get("consumer_type")
    grouped = service().project_usages(args["project_id"], args.get("user_id"),
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
