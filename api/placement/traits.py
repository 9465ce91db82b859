"""Traits (1.6+): the catalogue (standard and ``CUSTOM_*``) and each provider's set."""

from __future__ import annotations

import flask

from fleetflow.api.placement import microversion, query, schemas
from fleetflow.api.placement.blueprint import base_url, blp, fence, no_content, service
from fleetflow.services.placement import CatalogNotFound, errors

TRAIT = {"type": "string", "minLength": 1, "maxLength": 255}
CUSTOM_TRAIT = dict(TRAIT, pattern=schemas.CUSTOM_PATTERN)
PROVIDER_TRAITS = {
    "type": "object",
    "properties": {"traits": {"type": "array", "items": TRAIT},
                   "resource_provider_generation": {"type": "integer"}},
    "required": ["traits", "resource_provider_generation"],
    "additionalProperties": False,
}
LIST_QUERY = {"type": "object",
              "properties": {"name": {"type": "string"}, "associated": {"type": "string"}},
              "additionalProperties": False}


class GenerationChanged(errors.ConcurrentUpdate):
    pass


@blp.route("/traits", methods=["GET"])
def list_traits():
    microversion.require(1, 6)
    query.validate(LIST_QUERY)
    args = flask.request.args
    associated = None
    if "associated" in args:
        if args["associated"].lower() not in ("true", "false"):
            raise errors.BadRequest('The query parameter "associated" only accepts "true" '
                                    'or "false"')
        associated = args["associated"].lower() == "true"
    traits = service().list_traits(associated)
    if "name" in args:
        operator, sep, value = args["name"].partition(":")
        if not sep or operator not in ("in", "startswith"):
            raise errors.BadRequest(
                "Badly formatted name parameter. Expected name query string parameter in "
                f'form: ?name=[in|startswith]:[name1,name2|prefix]. Got: "{args["name"]}"')
        if operator == "in":
            wanted = set(value.split(","))
            traits = [t for t in traits if t in wanted]
        else:
            traits = [t for t in traits if t.startswith(value)]
    return {"traits": traits}


@blp.route("/traits/<name>", methods=["GET"])
def show_trait(name):
    microversion.require(1, 6)
    if not service().trait_exists(name):
        raise CatalogNotFound(f"No such trait(s): {name}.")
    return no_content()


@blp.route("/traits/<name>", methods=["PUT"])
def create_trait(name):
    microversion.require(1, 6)
    try:
        schemas.validate(name, CUSTOM_TRAIT)
    except errors.BadRequest:
        raise errors.BadRequest(
            'The trait is invalid. A valid trait must be no longer than 255 characters, '
            'start with the prefix "CUSTOM_" and use following characters: "A"-"Z", '
            '"0"-"9" and "_"') from None
    existed = service().trait_exists(name)
    if not existed:
        service().ensure_traits([name])
    response = no_content()
    response.status_code = 204 if existed else 201
    response.headers["Location"] = f"{base_url()}/traits/{name}"
    return response


@blp.route("/traits/<name>", methods=["DELETE"])
def delete_trait(name):
    microversion.require(1, 6)
    service().delete_trait(name)
    return no_content()


@blp.route("/resource_providers/<uuid>/traits", methods=["GET"])
def list_provider_traits(uuid):
    microversion.require(1, 6)
    generation, traits = service().get_traits(uuid)
    return {"traits": traits, "resource_provider_generation": generation}


@blp.route("/resource_providers/<uuid>/traits", methods=["PUT"])
def set_provider_traits(uuid):
    microversion.require(1, 6)
    data = schemas.json_body(PROVIDER_TRAITS)
    current = service().get_provider(uuid)
    if current["generation"] != data["resource_provider_generation"]:
        raise GenerationChanged("Resource provider's generation already changed. Please "
                                "update the generation and try again.")
    unknown = service().unknown_traits(data["traits"])
    if unknown:
        raise errors.BadRequest(f"No such trait {', '.join(unknown)}")
    generation, traits = service().set_traits(uuid, data["resource_provider_generation"],
                                              data["traits"], fence())
    return {"traits": traits, "resource_provider_generation": generation}


@blp.route("/resource_providers/<uuid>/traits", methods=["DELETE"])
def delete_provider_traits(uuid):
    microversion.require(1, 6)
    generation, _ = service().get_traits(uuid)
    service().set_traits(uuid, generation, [], fence())
    return no_content()
