"""Schemas of the volume routes: every volume of a project, whatever made it."""

from __future__ import annotations

import flask
import marshmallow as ma
from oslo_policy import policy as oslo_policy

from fleetflow.api import fields
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.api.state import current_state
from fleetflow.common import states

SHOW_BACKEND_RULE = "volumes:show_backend"
VOLUME_STATUSES = (states.VOLUME_CREATING, states.VOLUME_AVAILABLE, states.VOLUME_IN_USE,
                   states.VOLUME_ERROR, states.VOLUME_DELETED)


def may_see_backends() -> bool:
    """Whether the caller may see which storage backend holds a volume (once per request)."""
    allowed = getattr(flask.g, "may_see_backends", None)
    if allowed is None:
        context = flask.g.context
        tenant = (flask.request.view_args or {}).get("tenant_id") or context.project_id
        try:
            allowed = bool(current_state().enforcer.enforce(
                SHOW_BACKEND_RULE, {"project_id": tenant}, context))
        except oslo_policy.InvalidScope:
            allowed = False
        flask.g.may_see_backends = allowed
    return allowed


class BackendName(ma.fields.String):
    """A backend name shown to callers that pass ``volumes:show_backend``; null to others.

    NOTE: null rather than left out, so clients that read the key keep working
    (as a server's host).
    """

    def _serialize(self, value, attr, obj, **kwargs):
        if value is None or not may_see_backends():
            return None
        return super()._serialize(value, attr, obj, **kwargs)


class VolumeSchema(ma.Schema):
    """One volume: a vcluster's member, a reservation's data volume, any other."""

    id = ma.fields.String(required=True)
    name = ma.fields.String(allow_none=True)
    size = ma.fields.Integer(required=True, attribute="size_gb",
                             metadata={"description": "GB."})
    volume_type = ma.fields.String(allow_none=True)
    status = ma.fields.String(required=True,
                              metadata={"description": " | ".join(VOLUME_STATUSES)})
    attached_to = ma.fields.String(allow_none=True, attribute="instance_id",
                                   metadata={"description": "The server (uuid) it is "
                                                            "attached to."})
    vcluster_id = ma.fields.String(allow_none=True)
    backend = BackendName(allow_none=True,
                          metadata={"description": "The storage backend holding it "
                                                   "(administrators; null to others)."})
    created_at = fields.UtcDateTime()
    updated_at = fields.UtcDateTime()


class VolumeResponseSchema(ma.Schema):
    volume = ma.fields.Nested(VolumeSchema, required=True)


class VolumeListSchema(ma.Schema):
    volumes = ma.fields.List(ma.fields.Nested(VolumeSchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class VolumeQueryArgsSchema(PaginationArgsSchema):
    """Sorted by id; the marker is a volume id."""

    vcluster_id = ma.fields.String(metadata={"description": "Only this cluster's volumes."})
    status = ma.fields.String(validate=ma.validate.OneOf(VOLUME_STATUSES),
                              metadata={"description": "Deleted volumes are listed only "
                                                       "with status=DELETED."})
