"""Schemas of the admin's view of the queue."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api import fields
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.api.reservations.schemas import QueuePositionSchema


class QueueItemSchema(QueuePositionSchema):
    """A waiting request: what it is, whose, and where it stands."""

    kind = ma.fields.String(required=True, metadata={"description": "reservation | vcluster"})
    id = ma.fields.String(required=True)
    tenant_id = ma.fields.String(required=True)
    priority = ma.fields.Integer(required=True)
    deadline = fields.UtcDateTime(allow_none=True, metadata={
        "description": "When its queue_timeout runs out (null: never)."})
    bypassed = ma.fields.Integer(required=True, metadata={
        "description": "Requests behind it admitted first (the starvation bound counts "
                       "them)."})


class QueueListSchema(ma.Schema):
    queue = ma.fields.List(ma.fields.Nested(QueueItemSchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class QueueQueryArgsSchema(PaginationArgsSchema):
    """In queue order; the marker is a waiting request's id."""
