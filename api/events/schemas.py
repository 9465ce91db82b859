"""Schemas of the events feed (services/events.py)."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.services.events import KINDS, MAX_LIMIT


class EventsQueryArgsSchema(ma.Schema):
    since = ma.fields.String(metadata={
        "description": "The cursor of the last answer: only what changed after it."})
    limit = ma.fields.Integer(load_default=100, validate=ma.validate.Range(min=1, max=MAX_LIMIT),
                              metadata={"description": "At most this many events."})


class EventSchema(ma.Schema):
    kind = ma.fields.String(required=True, validate=ma.validate.OneOf(tuple(KINDS)))
    id = ma.fields.String(required=True, metadata={"description": "Its id (a host: its name)."})
    state = ma.fields.String(required=True, metadata={
        "description": "Its state now (a host: its effective state)."})
    at = ma.fields.String(required=True, metadata={"description": "When its row changed."})
    tenant_id = ma.fields.String(allow_none=True)
    hosts = ma.fields.List(ma.fields.String(), metadata={"description": "An evacuation's."})
    evacuation_id = ma.fields.String(allow_none=True, metadata={
        "description": "A host's: the evacuation holding it."})


class EventsResponseSchema(ma.Schema):
    events = ma.fields.List(ma.fields.Nested(EventSchema), required=True,
                            metadata={"description": "Oldest first."})
    cursor = ma.fields.String(required=True, metadata={
        "description": "Ask again with since=cursor for what changes next."})
