"""Schemas of the capacity route (shapes of services/capacity.py's report)."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.services.capacity import LEVELS


class AmountsSchema(ma.Schema):
    used = ma.fields.Integer(required=True)
    total = ma.fields.Integer(required=True, metadata={
        "description": "What placement lets be allocated: (total - reserved) * ratio."})
    free = ma.fields.Integer(required=True)


def _resources():
    return ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.Nested(AmountsSchema),
                          required=True, metadata={"description": "By resource class."})


class CapacityHostSchema(ma.Schema):
    name = ma.fields.String(required=True)
    region = ma.fields.String()
    zone = ma.fields.String()
    rack = ma.fields.String()
    state = ma.fields.String(required=True, metadata={"description": "The effective state."})
    evacuation_id = ma.fields.String(allow_none=True,
                                     metadata={"description": "The evacuation holding it."})
    instances = ma.fields.Integer(required=True)
    fenced = ma.fields.Boolean(metadata={
        "description": "Set down (not merely silent): fenced by a recovery, a rebuild "
                       "evacuation or an operator; placement lists its disabled trait."})
    reason = ma.fields.String(allow_none=True, metadata={"description": "Why its state."})
    resources = _resources()


class LevelSchema(ma.Schema):
    """A region, a zone or a rack: its hosts' capacity added up."""

    name = ma.fields.String(required=True)
    resources = _resources()
    instances = ma.fields.Integer(required=True)
    host_count = ma.fields.Integer(required=True)
    states = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.Integer(),
                            metadata={"description": "Hosts by effective state."})


class RackSchema(LevelSchema):
    hosts = ma.fields.List(ma.fields.Nested(CapacityHostSchema), metadata={
        "description": "The rack's hosts (by=host)."})


class ZoneSchema(LevelSchema):
    racks = ma.fields.List(ma.fields.Nested(RackSchema))


class RegionSchema(LevelSchema):
    zones = ma.fields.List(ma.fields.Nested(ZoneSchema))


class BackendSchema(ma.Schema):
    name = ma.fields.String(required=True)
    scope = ma.fields.String(metadata={"description": "host | rack"})
    region = ma.fields.String()
    zone = ma.fields.String()
    rack = ma.fields.String()
    host = ma.fields.String(allow_none=True)
    resources = _resources()


class CapacitySchema(ma.Schema):
    resources = _resources()
    instances = ma.fields.Integer(required=True)
    host_count = ma.fields.Integer(required=True)
    states = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.Integer())
    regions = ma.fields.List(ma.fields.Nested(RegionSchema), required=True)
    backends = ma.fields.List(ma.fields.Nested(BackendSchema), required=True)


class CapacityResponseSchema(ma.Schema):
    capacity = ma.fields.Nested(CapacitySchema, required=True)


class CapacityQueryArgsSchema(ma.Schema):
    region = ma.fields.String(metadata={"description": "Only this region."})
    zone = ma.fields.String(metadata={"description": "Only this zone."})
    by = ma.fields.String(load_default="host", validate=ma.validate.OneOf(LEVELS),
                          metadata={"description": "The deepest level listed."})
