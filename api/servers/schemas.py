"""Schemas of the server routes: the instances of a project, one by one."""

from __future__ import annotations

import flask
import marshmallow as ma

from fleetflow.api import fields, hosts_view
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.api.reservations.schemas import FaultSchema
from fleetflow.common import states


class ServerSchema(ma.Schema):
    """One instance. Its id is a uuid; its reservation's id is an ``r-...``."""

    id = ma.fields.String(required=True)
    name = ma.fields.String(required=True)
    tenant_id = ma.fields.String(required=True)
    reservation_id = ma.fields.String(allow_none=True)
    host = hosts_view.HostName(
        allow_none=True,
        metadata={"description": "Where it runs: null to callers the policy rule "
                                 "servers:show_host refuses (by default every reader of "
                                 "the project passes it)."})
    host_id = hosts_view.HostId(attribute="host")
    status = ma.fields.String(required=True,
                              metadata={"description": " | ".join(states.RESERVATION_STATUSES)})
    task_state = ma.fields.String(allow_none=True,
                                  metadata={"description": "What is being done to it now "
                                                           "(migrating, rebuilding while an "
                                                           "evacuation moves it)."})
    flavor_id = ma.fields.String(required=True)
    image_id = ma.fields.String(required=True)
    group_id = ma.fields.String(allow_none=True)
    metadata = ma.fields.Function(
        lambda instance: dict(instance.metadata_ or {}),
        metadata={"type": "object", "additionalProperties": {"type": "string"},
                  "description": "Its metadata (keys and values strings), as Nova's; "
                                 "automatic recovery reads ha, recovery and "
                                 "recovery_priority (docs/recovery.md)."})
    attempts = ma.fields.Integer(required=True)
    hosts_tried = ma.fields.List(hosts_view.Place(), required=True, metadata={
        "description": "Hosts it was sent to, in order (their host_ids to callers "
                       "servers:show_host refuses)."})
    fault = ma.fields.Nested(FaultSchema, allow_none=True)
    created_at = fields.UtcDateTime()
    updated_at = fields.UtcDateTime()
    links = ma.fields.Function(lambda instance: [{"rel": "self", "href": self_link(instance)}])


def self_link(instance) -> str:
    """The server's own URL (under its project's path)."""
    return flask.url_for("servers.ServerItem", tenant_id=instance.tenant_id,
                         server_id=instance.id, _external=True)


class ServerResponseSchema(ma.Schema):
    server = ma.fields.Nested(ServerSchema, required=True)


class ServerListSchema(ma.Schema):
    servers = ma.fields.List(ma.fields.Nested(ServerSchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class ServerQueryArgsSchema(PaginationArgsSchema):
    """Filters combine (AND); sorted by id, the marker is a server id.

    Deleted servers are listed only when ``status=DELETED`` is asked for.
    """

    reservation_id = ma.fields.String(metadata={"description": "Servers of one reservation."})
    status = ma.fields.String(validate=ma.validate.OneOf(states.RESERVATION_STATUSES))
    host = ma.fields.String(metadata={"description": "Administrators only."})


class TenantServerQueryArgsSchema(ServerQueryArgsSchema):
    """The project's list; an administrator may ask for every project's (as Nova)."""

    all_tenants = ma.fields.Boolean(
        metadata={"description": "Administrators: the servers of every project (as "
                                 "GET /v2/admin/servers). Others: ignored, as Nova does."})


class AdminServerQueryArgsSchema(ServerQueryArgsSchema):
    """Every project's servers; ``project_id`` (or its alias ``tenant_id``) picks one."""

    project_id = ma.fields.String(metadata={"description": "Servers of one project."})
    tenant_id = ma.fields.String(metadata={"description": "The same as project_id."})

    @ma.validates_schema
    def _one_project(self, data, **kwargs):
        project, tenant = data.get("project_id"), data.get("tenant_id")
        if project is not None and tenant is not None and project != tenant:
            raise ma.ValidationError("names another project than project_id",
                                     field_name="tenant_id")


class ServerStatusSchema(ma.Schema):
    """What DELETE answers: the server's new status and where to follow it."""

    id = ma.fields.String(required=True)
    status = ma.fields.String(required=True)
    task_state = ma.fields.String(allow_none=True)
    links = ma.fields.Function(lambda instance: [{"rel": "self", "href": self_link(instance)}])


class ServerDeleteResponseSchema(ma.Schema):
    server = ma.fields.Nested(ServerStatusSchema, required=True)


class ServerMetadataSchema(ma.Schema):
    """Body of PUT and POST .../servers/{id}/metadata, and their answer, as Nova's."""

    metadata = fields.server_metadata(required=True)
