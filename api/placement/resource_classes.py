"""``/resource_classes``: the standard classes and custom (``CUSTOM_*``) ones (1.2+).

1.2-1.6 create with POST and rename with PUT; from 1.7 PUT creates (201) or
confirms (204) a custom class by its name.
"""

from __future__ import annotations

import flask

from fleetflow.api.placement import microversion, schemas
from fleetflow.api.placement.blueprint import base_url, blp, no_content, service
from fleetflow.services.placement import DuplicateResourceClass


def _url(name: str) -> str:
    return f"{base_url()}/resource_classes/{name}"


def _class_json(name: str) -> dict:
    return {"name": name, "links": [{"rel": "self", "href": _url(name)}]}


def _created(name: str, status: int) -> flask.Response:
    response = no_content()
    response.status_code = status
    response.headers["Location"] = _url(name)
    return response


@blp.route("/resource_classes", methods=["GET"])
def list_resource_classes():
    microversion.require(1, 2)
    names = service().list_resource_classes()
    return {"resource_classes": [_class_json(name) for name in names]}


@blp.route("/resource_classes", methods=["POST"])
def create_resource_class():
    microversion.require(1, 2)
    name = schemas.json_body(schemas.RESOURCE_CLASS)["name"]
    if not service().create_resource_class(name):
        raise DuplicateResourceClass(
            f"Conflicting resource class already exists: {name}")
    return _created(name, 201)


@blp.route("/resource_classes/<name>", methods=["GET"])
def show_resource_class(name):
    microversion.require(1, 2)
    service().check_resource_class(name)
    return _class_json(name)


@blp.route("/resource_classes/<name>", methods=["PUT"])
def update_resource_class(name):
    microversion.require(1, 2)
    if microversion.at_least(1, 7):
        schemas.validate({"name": name}, schemas.RESOURCE_CLASS)
        created = service().create_resource_class(name)
        return _created(name, 201 if created else 204)
    new_name = schemas.json_body(schemas.RESOURCE_CLASS)["name"]
    service().rename_resource_class(name, new_name)
    return _class_json(new_name)


@blp.route("/resource_classes/<name>", methods=["DELETE"])
def delete_resource_class(name):
    microversion.require(1, 2)
    service().delete_resource_class(name)
    return no_content()
