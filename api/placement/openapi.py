"""The OpenAPI description of ``/placement``: bodies and answers as OpenStack Placement's.

The views are plain functions (Placement's JSON is not marshmallow-shaped and
changes with the microversion), so their request and response schemas are
written here as JSON Schema and attached to the document by
:func:`document`. Each describes the newest shape (microversion 1.39); fields
that only some microversions have are optional and say from which version.
"""

from __future__ import annotations

from fleetflow.api.placement import microversion
from fleetflow.services.placement import INVENTORY_FIELDS

REF = "#/components/schemas/"


def _ref(name: str) -> dict:
    return {"$ref": REF + name}


def _object(properties: dict, required=(), description: str | None = None,
            additional=False) -> dict:
    schema = {"type": "object", "properties": properties,
              "additionalProperties": additional}
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


GENERATION = {"type": "integer", "minimum": 0,
              "description": "Changes on every write; send the one you read (409 if stale)."}
UUID = {"type": "string", "format": "uuid"}
NULLABLE_UUID = {"type": "string", "format": "uuid", "nullable": True}
# NOTE: not format uuid: an empty string is taken as no parent, as null is.
PARENT = {"type": "string", "format": "uuid", "nullable": True,
          "description": "An existing provider's uuid (400 otherwise), or null: none. "
                         "Microversion 1.14+; re-parenting and un-parenting from 1.37."}
RESOURCE_AMOUNTS = {"type": "object", "additionalProperties": {"type": "integer"},
                    "description": "Amount per resource class (VCPU, MEMORY_MB, DISK_GB ...)."}

INVENTORY_PROPERTIES = {
    "total": {"type": "integer", "minimum": 1},
    "reserved": {"type": "integer", "minimum": 0},
    "min_unit": {"type": "integer", "minimum": 1},
    "max_unit": {"type": "integer", "minimum": 1},
    "step_size": {"type": "integer", "minimum": 1},
    "allocation_ratio": {"type": "number", "exclusiveMinimum": True, "minimum": 0},
}
assert set(INVENTORY_PROPERTIES) == set(INVENTORY_FIELDS)

SCHEMAS = {
    "PlacementVersions": _object({"versions": {"type": "array", "items": _object({
        "id": {"type": "string"}, "status": {"type": "string"},
        "min_version": {"type": "string"}, "max_version": {"type": "string"},
        "links": {"type": "array", "items": {"type": "object"}}},
        required=("id", "status", "min_version", "max_version", "links"))}},
        required=("versions",)),
    "PlacementLink": _object({"rel": {"type": "string"}, "href": {"type": "string"}},
                             required=("rel", "href")),
    "ResourceProvider": _object({
        "uuid": UUID, "name": {"type": "string"}, "generation": GENERATION,
        "links": {"type": "array", "items": _ref("PlacementLink")},
        "parent_provider_uuid": {**NULLABLE_UUID, "description": "Microversion 1.14+."},
        "root_provider_uuid": {**UUID, "description": "Microversion 1.14+."}},
        required=("uuid", "name", "generation", "links")),
    "ResourceProviderList": _object(
        {"resource_providers": {"type": "array", "items": _ref("ResourceProvider")}},
        required=("resource_providers",)),
    "ResourceProviderCreate": _object({
        "name": {"type": "string", "maxLength": 200},
        "uuid": {**UUID, "description": "Made by the server when not given."},
        "parent_provider_uuid": PARENT}, required=("name",)),
    "ResourceProviderUpdate": _object({
        "name": {"type": "string", "maxLength": 200},
        "parent_provider_uuid": PARENT}, required=("name",)),
    "Inventory": _object(INVENTORY_PROPERTIES, required=("total",),
                         description="Omitted fields take Placement's defaults."),
    "Inventories": _object({
        "resource_provider_generation": GENERATION,
        "inventories": {"type": "object", "additionalProperties": _ref("Inventory")}},
        required=("resource_provider_generation", "inventories")),
    "InventoryItem": _object({**INVENTORY_PROPERTIES,
                              "resource_provider_generation": GENERATION},
                             required=("resource_provider_generation", "total")),
    "ProviderTraits": _object({
        "traits": {"type": "array", "items": {"type": "string"}},
        "resource_provider_generation": GENERATION},
        required=("traits", "resource_provider_generation")),
    "Traits": _object({"traits": {"type": "array", "items": {"type": "string"}}},
                      required=("traits",)),
    "ProviderUsages": _object({"resource_provider_generation": GENERATION,
                               "usages": RESOURCE_AMOUNTS},
                              required=("resource_provider_generation", "usages")),
    "ProjectUsages": _object({"usages": {
        "type": "object",
        "description": "Before 1.38: amount per resource class. From 1.38: per consumer "
                       "type, amounts and consumer_count."}}, required=("usages",)),
    "ConsumerAllocations": _object({
        "allocations": {"type": "object", "additionalProperties": _object(
            {"resources": RESOURCE_AMOUNTS, "generation": GENERATION},
            required=("resources",)),
            "description": "Per resource provider uuid (the empty object: none)."},
        "project_id": {"type": "string"}, "user_id": {"type": "string"},
        "consumer_generation": {"type": "integer", "nullable": True,
                                "description": "Microversion 1.28+."},
        "consumer_type": {"type": "string", "description": "Microversion 1.38+."}},
        required=("allocations",),
        description="project_id and user_id from microversion 1.12, when any."),
    "ProviderAggregates": _object({
        "aggregates": {"type": "array", "items": UUID, "uniqueItems": True},
        "resource_provider_generation": {**GENERATION, "description": "Microversion 1.19+."}},
        required=("aggregates",)),
    "ProviderAggregatesWrite": _object({
        "aggregates": {"type": "array", "items": UUID, "uniqueItems": True},
        "resource_provider_generation": GENERATION},
        required=("aggregates", "resource_provider_generation"),
        description="From microversion 1.19; before it the body is the list of aggregate "
                    "uuids alone."),
    "InventoryCreate": _object({**INVENTORY_PROPERTIES,
                                "resource_class": {"type": "string",
                                                   "pattern": "^[A-Z0-9_]+$"}},
                               required=("resource_class", "total")),
    "ResourceClass": _object({"name": {"type": "string"},
                              "links": {"type": "array", "items": _ref("PlacementLink")}},
                             required=("name", "links")),
    "ResourceClasses": _object(
        {"resource_classes": {"type": "array", "items": _ref("ResourceClass")}},
        required=("resource_classes",)),
    "ResourceClassCreate": _object(
        {"name": {"type": "string", "pattern": "^CUSTOM_[A-Z0-9_]+$", "maxLength": 255}},
        required=("name",)),
    "Reshape": _object({
        "inventories": {"type": "object", "minProperties": 1,
                        "additionalProperties": _ref("Inventories"),
                        "description": "Per resource provider uuid: its whole inventory."},
        "allocations": {"type": "object", "description": "Per consumer uuid, as POST "
                                                         "/allocations (1.28+ shape)."}},
        required=("inventories", "allocations"),
        description="Inventories and allocations changed in one transaction; every "
                    "provider and consumer generation is checked (409 if any is stale)."),
    "AllocationsWrite": _object({
        "allocations": {"type": "object", "additionalProperties": _object(
            {"resources": RESOURCE_AMOUNTS, "generation": GENERATION},
            required=("resources",)),
            "description": "Per resource provider uuid (microversion 1.12+ shape)."},
        "project_id": {"type": "string", "minLength": 1},
        "user_id": {"type": "string", "minLength": 1},
        "consumer_generation": {"type": "integer", "nullable": True,
                                "description": "Required from 1.28: null for a new "
                                               "consumer, else the one read."},
        "mappings": {"type": "object", "description": "1.34+: accepted, not kept."},
        "consumer_type": {"type": "string", "minLength": 1,
                          "description": "Required from 1.38."}},
        required=("allocations", "project_id", "user_id")),
    "ManyAllocationsWrite": {
        "type": "object", "minProperties": 1,
        "additionalProperties": _ref("AllocationsWrite"),
        "description": "Per consumer uuid (microversion 1.13+)."},
    "ProviderAllocations": _object({
        "resource_provider_generation": GENERATION,
        "allocations": {"type": "object", "additionalProperties": _object(
            {"resources": RESOURCE_AMOUNTS,
             "consumer_generation": {"type": "integer", "nullable": True,
                                     "description": "Microversion 1.28+."}},
            required=("resources",)), "description": "Per consumer uuid."}},
        required=("resource_provider_generation", "allocations")),
    "AllocationCandidates": _object({
        "allocation_requests": {"type": "array", "items": {
            "type": "object", "required": ["allocations"],
            "properties": {"allocations": {
                "description": "Per provider uuid (1.12+), a list before 1.12."},
                "mappings": {"type": "object", "description": "Microversion 1.34+."}}}},
        "provider_summaries": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["resources"],
            "properties": {
                "resources": {"type": "object"},
                "traits": {"type": "array", "items": {"type": "string"},
                           "description": "Microversion 1.17+."},
                "parent_provider_uuid": {**NULLABLE_UUID,
                                         "description": "Microversion 1.29+."},
                "root_provider_uuid": {**UUID, "description": "Microversion 1.29+."}}}}},
        required=("allocation_requests", "provider_summaries")),
}


def _json(schema: str, description: str = "OK") -> dict:
    return {"description": description,
            "content": {"application/json": {"schema": _ref(schema)}}}


def _empty(description: str) -> dict:
    return {"description": description}


def _query(name: str, description: str, required=False, **schema) -> dict:
    return {"in": "query", "name": name, "required": required,
            "description": description, "schema": {"type": "string", **schema}}


RESOURCES_QUERY = _query("resources", "CLASS:AMOUNT,... that a provider must have free.")
REQUIRED_QUERY = _query("required", "Traits a provider must have (!TRAIT: must not; "
                                    "in:A,B: one of, 1.39+).")

# method, path -> what the operation takes and answers. Errors are added for
# every operation by fleetflow.api.openapi.
OPERATIONS = {
    # Version discovery, as Placement: no credentials needed.
    ("get", "/placement/"): {"responses": {"200": _json("PlacementVersions")},
                             "security": []},
    ("get", "/placement/resource_providers"): {
        "parameters": [_query("name", "Exact name."), _query("uuid", "Exact uuid."),
                       _query("member_of", "Aggregates (none are kept: always empty)."),
                       RESOURCES_QUERY, _query("in_tree", "Providers of this tree."),
                       REQUIRED_QUERY],
        "responses": {"200": _json("ResourceProviderList")}},
    ("post", "/placement/resource_providers"): {
        "requestBody": "ResourceProviderCreate",
        "responses": {"200": _json("ResourceProvider", "Created (microversion 1.20+)."),
                      "201": _empty("Created (before 1.20); Location names it.")}},
    ("get", "/placement/resource_providers/{uuid}"): {
        "responses": {"200": _json("ResourceProvider")}},
    ("put", "/placement/resource_providers/{uuid}"): {
        "requestBody": "ResourceProviderUpdate",
        "responses": {"200": _json("ResourceProvider")}},
    ("delete", "/placement/resource_providers/{uuid}"): {
        "responses": {"204": _empty("Deleted.")}},
    ("get", "/placement/resource_providers/{uuid}/inventories"): {
        "responses": {"200": _json("Inventories")}},
    ("put", "/placement/resource_providers/{uuid}/inventories"): {
        "requestBody": "Inventories", "responses": {"200": _json("Inventories")}},
    ("delete", "/placement/resource_providers/{uuid}/inventories"): {
        "responses": {"204": _empty("Deleted (microversion 1.5+).")}},
    ("get", "/placement/resource_providers/{uuid}/inventories/{resource_class}"): {
        "responses": {"200": _json("InventoryItem")}},
    ("put", "/placement/resource_providers/{uuid}/inventories/{resource_class}"): {
        "requestBody": "InventoryItem", "responses": {"200": _json("InventoryItem")}},
    ("delete", "/placement/resource_providers/{uuid}/inventories/{resource_class}"): {
        "responses": {"204": _empty("Deleted.")}},
    ("get", "/placement/resource_providers/{uuid}/traits"): {
        "responses": {"200": _json("ProviderTraits", "Microversion 1.6+.")}},
    ("put", "/placement/resource_providers/{uuid}/traits"): {
        "requestBody": "ProviderTraits",
        "responses": {"200": _json("ProviderTraits", "Microversion 1.6+.")}},
    ("delete", "/placement/resource_providers/{uuid}/traits"): {
        "responses": {"204": _empty("Deleted (microversion 1.6+).")}},
    ("get", "/placement/resource_providers/{uuid}/usages"): {
        "responses": {"200": _json("ProviderUsages")}},
    ("get", "/placement/resource_providers/{uuid}/allocations"): {
        "responses": {"200": _json("ProviderAllocations")}},
    ("get", "/placement/resource_providers/{uuid}/aggregates"): {
        "responses": {"200": _json("ProviderAggregates", "Microversion 1.1+.")}},
    ("put", "/placement/resource_providers/{uuid}/aggregates"): {
        "requestBody": "ProviderAggregatesWrite",
        "responses": {"200": _json("ProviderAggregates", "Microversion 1.1+.")}},
    ("post", "/placement/resource_providers/{uuid}/inventories"): {
        "requestBody": "InventoryCreate",
        "responses": {"201": _json("InventoryItem", "Created; Location names it.")}},
    ("post", "/placement/reshaper"): {
        "requestBody": "Reshape",
        "responses": {"204": _empty("Reshaped, all or nothing (microversion 1.30+).")}},
    ("get", "/placement/resource_classes"): {
        "responses": {"200": _json("ResourceClasses", "Microversion 1.2+.")}},
    ("post", "/placement/resource_classes"): {
        "requestBody": "ResourceClassCreate",
        "responses": {"201": _empty("Created; Location names it (microversion 1.2+).")}},
    ("get", "/placement/resource_classes/{name}"): {
        "responses": {"200": _json("ResourceClass", "Microversion 1.2+.")}},
    ("put", "/placement/resource_classes/{name}"): {
        "responses": {"200": _json("ResourceClass", "Renamed (1.2-1.6, body "
                                                    "{\"name\": new name})."),
                      "201": _empty("Created (1.7+; no body); Location names it."),
                      "204": _empty("It existed already (1.7+).")}},
    ("delete", "/placement/resource_classes/{name}"): {
        "responses": {"204": _empty("Deleted (a custom class no inventory uses).")}},
    ("delete", "/placement/traits/{name}"): {
        "responses": {"204": _empty("Deleted (a custom trait no provider has).")}},
    ("get", "/placement/traits"): {
        "parameters": [_query("name", "startswith:PREFIX or in:A,B,..."),
                       _query("associated", "Accepted, not applied.")],
        "responses": {"200": _json("Traits", "Microversion 1.6+.")}},
    ("get", "/placement/traits/{name}"): {
        "responses": {"204": _empty("The trait exists (microversion 1.6+).")}},
    ("put", "/placement/traits/{name}"): {
        "responses": {"201": _empty("Created; Location names it."),
                      "204": _empty("It existed already.")}},
    ("get", "/placement/usages"): {
        "parameters": [_query("project_id", "Whose usage.", required=True, minLength=1),
                       _query("user_id", "Only this user's."),
                       _query("consumer_type", "1.38+: one type, or all.")],
        "responses": {"200": _json("ProjectUsages", "Microversion 1.9+.")}},
    ("get", "/placement/allocations/{consumer_uuid}"): {
        "responses": {"200": _json("ConsumerAllocations")}},
    ("put", "/placement/allocations/{consumer_uuid}"): {
        "requestBody": "AllocationsWrite",
        "responses": {"204": _empty("Written (microversion 1.12+).")}},
    ("delete", "/placement/allocations/{consumer_uuid}"): {
        "responses": {"204": _empty("Deleted.")}},
    ("post", "/placement/allocations"): {
        "requestBody": "ManyAllocationsWrite",
        "responses": {"204": _empty("Written, all or none (microversion 1.13+).")}},
    ("get", "/placement/allocation_candidates"): {
        "parameters": [{**RESOURCES_QUERY, "required": True},
                       {"in": "query", "name": "limit", "required": False,
                        "description": "At most this many (1.16+).",
                        "schema": {"type": "integer", "minimum": 1}},
                       REQUIRED_QUERY],
        "responses": {"200": _json("AllocationCandidates", "Microversion 1.10+.")}},
}

VERSION_HEADER = {
    "in": "header", "name": microversion.HEADER, "required": False,
    "description": "placement X.Y or placement latest: the microversion to speak, "
                   f"{microversion.as_text(microversion.MIN_VERSION)} to "
                   f"{microversion.as_text(microversion.MAX_VERSION)} (default "
                   f"{microversion.as_text(microversion.MIN_VERSION)}; entries for other "
                   "services are ignored; a malformed placement version is a 400, one "
                   "out of range a 406). The answer names the one used.",
    "schema": {"type": "string", "example": f"{microversion.SERVICE} "
                                             f"{microversion.as_text(microversion.MAX_VERSION)}"},
}


def document(spec) -> None:
    """Put the schemas, bodies, answers and the version header into ``spec``."""
    for name, schema in SCHEMAS.items():
        spec.components.schema(name, schema)
    # NOTE: apispec keeps the paths it was given in ``_paths`` and has no
    # public way to amend an operation once registered.
    paths = spec._paths
    if not any(path in paths for _, path in OPERATIONS):
        return  # not served here (openstack mode: clients use the cloud's Placement)
    for (method, path), doc in OPERATIONS.items():
        operation = paths[path][method]
        responses = operation.setdefault("responses", {})
        responses.update(doc["responses"])
        operation.setdefault("parameters", []).extend(
            [*doc.get("parameters", ()), VERSION_HEADER])
        if "security" in doc:
            operation["security"] = doc["security"]
        if "requestBody" in doc:
            operation["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": _ref(doc["requestBody"])}}}
