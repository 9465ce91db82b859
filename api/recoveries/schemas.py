"""Schemas of the recovery routes: the monitor's detections, its switch, a host's plan."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api import fields
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.api.evacuations.schemas import HOST_NAME, EvacuationDryRunInstanceSchema

# Which servers of a project a recovery moves (persistence.recoveries.PROJECT_SERVERS).
PROJECT_SERVERS = ("all", "ha", "none")
STATUSES = ("SUSPECT", "DEAD", "HELD", "FENCED", "EVACUATING", "FLAPPED", "CLEARED",
            "ABORTED", "DONE", "PARTIAL", "FAILED", "REVERTED")


class TimelineEventSchema(ma.Schema):
    event = ma.fields.String(required=True, metadata={
        "description": "suspect | dead | storm-guard | storm-over | fenced | evacuation | "
                       "paused | the outcome (done, partial, failed, reverted, flapped, "
                       "cleared, aborted)"})
    at = ma.fields.String(required=True, metadata={"description": "UTC, ISO 8601."})
    detail = ma.fields.String()


class RecoveryListItemSchema(ma.Schema):
    id = ma.fields.String(required=True)
    host = ma.fields.String(required=True)
    zone = ma.fields.String(allow_none=True)
    status = ma.fields.String(required=True, metadata={"description": " | ".join(STATUSES)})
    evacuation_id = ma.fields.String(allow_none=True)
    detail = ma.fields.String(allow_none=True)
    suspect_at = fields.UtcDateTime()
    dead_at = fields.UtcDateTime(allow_none=True)
    fenced_at = fields.UtcDateTime(allow_none=True)
    finished_at = fields.UtcDateTime(allow_none=True)
    created_at = fields.UtcDateTime()
    updated_at = fields.UtcDateTime()
    links = ma.fields.List(ma.fields.Nested(LinkSchema))


class RecoverySchema(RecoveryListItemSchema):
    timeline = ma.fields.List(ma.fields.Nested(TimelineEventSchema), required=True)


class RecoveryResponseSchema(ma.Schema):
    recovery = ma.fields.Nested(RecoverySchema, required=True)


class StormSchema(ma.Schema):
    fleet = ma.fields.Boolean(required=True, metadata={
        "description": "More than max_dead_fraction of the fleet's hosts look dead now."})
    zones = ma.fields.List(ma.fields.String(), required=True, metadata={
        "description": "Zones where more than max_dead_fraction of the hosts look dead."})
    max_dead_fraction = ma.fields.Float(required=True)


class RecoveryStatusSchema(ma.Schema):
    enabled = ma.fields.Boolean(required=True)
    paused = ma.fields.Boolean(required=True)
    reason = ma.fields.String(allow_none=True)
    user_id = ma.fields.String(allow_none=True)
    updated_at = fields.UtcDateTime(allow_none=True)
    storm = ma.fields.Nested(StormSchema, required=True)


class RecoveryListSchema(ma.Schema):
    recoveries = ma.fields.List(ma.fields.Nested(RecoveryListItemSchema), required=True)
    recovery = ma.fields.Nested(RecoveryStatusSchema, required=True, metadata={
        "description": "The monitor's switch and the storm guard now."})
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class RecoveryQueryArgsSchema(PaginationArgsSchema):
    """Newest first; the marker is a recovery id."""

    status = ma.fields.String(validate=ma.validate.OneOf(STATUSES))
    host = ma.fields.String(validate=HOST_NAME,
                            metadata={"description": "Recoveries of this host."})


class RecoverySwitchFieldsSchema(ma.Schema):
    reason = fields.Text(allow_none=True, validate=ma.validate.Length(max=255))


class RecoverySwitchSchema(ma.Schema):
    """Body of pause and resume: ``{}`` or ``{"recovery": {"reason": "..."}}``."""

    recovery = ma.fields.Nested(RecoverySwitchFieldsSchema, load_default=dict)


class RecoveryStatusResponseSchema(ma.Schema):
    recovery = ma.fields.Nested(RecoveryStatusSchema, required=True)


class StayingSchema(ma.Schema):
    id = ma.fields.String(required=True)
    why = ma.fields.String(required=True)


class RecoveryPlanSchema(ma.Schema):
    """What a recovery of the host would do if it died now; nothing changes."""

    host = ma.fields.String(required=True)
    zone = ma.fields.String(allow_none=True)
    where = ma.fields.String(required=True, metadata={"description": "any | reserve | zone"})
    fits = ma.fields.Boolean(required=True)
    instances = ma.fields.List(ma.fields.Nested(EvacuationDryRunInstanceSchema),
                               required=True, metadata={"description": "In move order."})
    staying = ma.fields.List(ma.fields.Nested(StayingSchema), required=True)
    enabled = ma.fields.Boolean(required=True)
    paused = ma.fields.Boolean(required=True)


class RecoveryPlanResponseSchema(ma.Schema):
    recovery_plan = ma.fields.Nested(RecoveryPlanSchema, required=True)


class RecoveryProjectSchema(ma.Schema):
    project_id = ma.fields.String(required=True)
    servers = ma.fields.String(required=True, metadata={
        "description": "all | ha | none: which of the project's servers a recovery moves "
                       "(recovery=never servers never move)."})
    reason = ma.fields.String(allow_none=True)
    user_id = ma.fields.String(allow_none=True)
    updated_at = fields.UtcDateTime(allow_none=True)
    default = ma.fields.Boolean(metadata={
        "description": "True: no override; servers is [recovery] servers."})


class RecoveryProjectResponseSchema(ma.Schema):
    project = ma.fields.Nested(RecoveryProjectSchema, required=True)


class RecoveryProjectListSchema(ma.Schema):
    projects = ma.fields.List(ma.fields.Nested(RecoveryProjectSchema), required=True)


class RecoveryProjectFieldsSchema(ma.Schema):
    servers = ma.fields.String(required=True, validate=ma.validate.OneOf(PROJECT_SERVERS))
    reason = fields.Text(allow_none=True, validate=ma.validate.Length(max=255))


class RecoveryProjectUpdateSchema(ma.Schema):
    """Body of PUT .../recoveries/projects/{project}: ``{"project": {"servers": "ha"}}``."""

    project = ma.fields.Nested(RecoveryProjectFieldsSchema, required=True)
