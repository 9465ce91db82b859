"""Schemas of the admin host routes."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api import fields
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.common import states

STATE_FIELD_HELP = "Operator-set state: " + " | ".join(states.HOST_STATES) + "."
EFFECTIVE_STATE_HELP = (" | ".join(states.HOST_STATES) + ": the operator's state, except that "
                        "an up host whose agent has been silent for [compute] "
                        "service_down_time reads down.")


class TopologySchema(ma.Schema):
    region = ma.fields.String(required=True)
    zone = ma.fields.String(required=True)
    rack = ma.fields.String(required=True)


class HostSchema(ma.Schema):
    """A compute host as the API shows it."""

    uuid = ma.fields.String(required=True, metadata={"description": "Also its provider uuid."})
    name = ma.fields.String(required=True)
    state = ma.fields.String(required=True, metadata={"description": EFFECTIVE_STATE_HELP})
    reason = ma.fields.String(allow_none=True,
                              metadata={"description": "Why the host is in its state."})
    topology = ma.fields.Nested(TopologySchema, required=True)
    # NOTE: the JSON columns are dumped as they are (no per-key fields):
    # typed keys/values cost a field call per entry, which dominated the
    # time of a 1,000-host page (bench/api.py).
    inventory = ma.fields.Dict(
        metadata={"description": "Per resource class: total, allocation_ratio, reserved."})
    capabilities = ma.fields.Dict(metadata={"description": "Free key/values (gpu, region)."})
    capacity = ma.fields.Dict(metadata={
        "description": "Per resource class of its placement inventory: used (allocated "
                       "now), total ((total - reserved) * allocation_ratio) and free."})
    traits = ma.fields.List(ma.fields.String())
    compute_agent = ma.fields.String(allow_none=True,
                                     metadata={"description": "RPC server serving the host."})
    instances = ma.fields.Integer(metadata={"description": "Instances living on the host "
                                                           "(neither deleted nor reverted)."})
    evacuation_id = ma.fields.String(allow_none=True,
                                     metadata={"description": "The evacuation holding the "
                                                              "host."})
    heartbeat_at = fields.UtcDateTime(allow_none=True,
                                      metadata={"description": "Last report of its agent."})
    created_at = fields.UtcDateTime()
    updated_at = fields.UtcDateTime()


class HostResponseSchema(ma.Schema):
    host = ma.fields.Nested(HostSchema, required=True)


class HostListSchema(ma.Schema):
    hosts = ma.fields.List(ma.fields.Nested(HostSchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class HostSimulateResponseSchema(ma.Schema):
    host = ma.fields.Nested(HostSchema, required=True)
    faults = ma.fields.Dict(metadata={"description": "The host's injected faults now "
                                                     "(dead, fail_next ...)."})


class HostQueryArgsSchema(PaginationArgsSchema):
    """Filters of the host list (sorted by name; the marker is a host name)."""

    state = ma.fields.String(validate=ma.validate.OneOf(states.HOST_STATES),
                             metadata={"description": "The effective state (see Host)."})
    region = ma.fields.String()
    zone = ma.fields.String()
    rack = ma.fields.String()


class HostStateSchema(ma.Schema):
    state = ma.fields.String(required=True, validate=ma.validate.OneOf(states.HOST_STATES),
                             metadata={"description": STATE_FIELD_HELP})
    reason = fields.Text(allow_none=True, validate=ma.validate.Length(max=255))


class HostUpdateSchema(ma.Schema):
    """Body of PUT /v2/admin/hosts/{name}: ``{"host": {"state": ..., "reason": ...}}``."""

    host = ma.fields.Nested(HostStateSchema, required=True)


class HostSimulateFieldsSchema(ma.Schema):
    dead = fields.JsonBoolean(required=True,
                             metadata={"description": "true: the host stops answering; "
                                                      "false: it comes back."})


class HostSimulateSchema(ma.Schema):
    """Body of POST /v2/admin/hosts/{name}/simulate: ``{"simulate": {"dead": true}}``."""

    simulate = ma.fields.Nested(HostSimulateFieldsSchema, required=True)
