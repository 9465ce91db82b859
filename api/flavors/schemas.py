"""Schemas of the flavor routes."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api.common import LinkSchema, PaginationArgsSchema


class FlavorSchema(ma.Schema):
    """A flavor: the resources one instance gets, and what its host must offer."""

    id = ma.fields.String(required=True)
    name = ma.fields.String(required=True)
    vcpus = ma.fields.Integer(required=True)
    ram_mb = ma.fields.Integer(required=True)
    disk_gb = ma.fields.Integer(required=True)
    extra_specs = ma.fields.Dict(
        keys=ma.fields.String(), values=ma.fields.Raw(),
        metadata={"description": "Host capabilities required, e.g. {\"gpu\": \"true\"}."})
    resources = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.Integer(),
                               metadata={"description": "Placement resources per instance."})


class FlavorResponseSchema(ma.Schema):
    flavor = ma.fields.Nested(FlavorSchema, required=True)


class FlavorListSchema(ma.Schema):
    flavors = ma.fields.List(ma.fields.Nested(FlavorSchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class FlavorQueryArgsSchema(PaginationArgsSchema):
    """Sorted by name; the marker is a flavor name."""
