"""Schemas of the server routes: the instances of a project, one by one."""

from __future__ import annotations

import flask
import marshmallow as ma
from oslo_policy import policy as oslo_policy

from fleetflow.api import fields
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.api.reservations.schemas import FaultSchema
from fleetflow.api.state import current_state
from fleetflow.common import states

SHOW_HOST_RULE = "servers:show_host"


def may_see_hosts() -> bool:
    """Whether the caller may see where servers run (asked once per request)."""
    allowed = getattr(flask.g, "may_see_hosts", None)
    if allowed is None:
        context = flask.g.context
        tenant = (flask.request.view_args or {}).get("tenant_id") or context.project_id
        try:
            allowed = bool(current_state().enforcer.enforce(
                SHOW_HOST_RULE, {"project_id": tenant}, context))
        except oslo_policy.InvalidScope:
            allowed = False
        flask.g.may_see_hosts = allowed
    return allowed


class HostName(ma.fields.String):
    """A host name shown to callers that pass ``servers:show_host``; null to others.

    NOTE: null rather than left out, so clients that read the key keep working.
    """

    def _serialize(self, value, attr, obj, **kwargs):
        if value is None or not may_see_hosts():
            return None
        return super()._serialize(value, attr, obj, **kwargs)


class ServerSchema(ma.Schema):
    """One instance. Its id is a uuid; its reservation's id is an ``r-...``."""

    id = ma.fields.String(required=True)
    name = ma.fields.String(required=True)
    tenant_id = ma.fields.String(required=True)
    reservation_id = ma.fields.String(allow_none=True)
    host = HostName(allow_none=True,
                    metadata={"description": "Where it runs (administrators; null to "
                                             "others)."})
    status = ma.fields.String(required=True,
                              metadata={"description": " | ".join(states.RESERVATION_STATUSES)})
    task_state = ma.fields.String(allow_none=True,
                                  metadata={"description": "What is being done to it now "
                                                           "(migrating, rebuilding while an "
                                                           "evacuation moves it)."})
    flavor_id = ma.fields.String(required=True)
    image_id = ma.fields.String(required=True)
    group_id = ma.fields.String(allow_none=True)
    attempts = ma.fields.Integer(required=True)
    hosts_tried = ma.fields.List(ma.fields.String(), required=True)
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
