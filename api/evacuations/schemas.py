"""Schemas of the evacuation routes: moving every server off hosts."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api import fields
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.api.reservations.schemas import FaultSchema
from fleetflow.common import states
from fleetflow.services.evacuations import MAX_PARALLEL_LIMIT

HOST_NAME = ma.validate.Length(min=1, max=255)


def _once_each(what: str):
    """A list validator: 400 naming the values given more than once."""
    def validate(values: list) -> None:
        seen, twice = set(), []
        for value in values:
            if value in seen and value not in twice:
                twice.append(value)
            seen.add(value)
        if twice:
            raise ma.ValidationError(f"names {what} more than once: {', '.join(twice)}")

    return validate


_no_duplicates = _once_each("a host")


def _names(**kwargs) -> ma.fields.List:
    return ma.fields.List(fields.Name(validate=HOST_NAME), **kwargs)


class EvacuateFieldsSchema(ma.Schema):
    """How to evacuate: everything but which hosts."""

    mode = ma.fields.String(
        required=True, validate=ma.validate.OneOf(states.EVACUATION_MODES),
        metadata={"description": "rebuild (the host is dead) | live | cold (maintenance) "
                                 "| drain (maintenance first, then live)."})
    target_hosts = _names(
        allow_none=True, validate=[ma.validate.Length(min=1), _no_duplicates],
        metadata={"description": "The only allowed destinations (default: any host "
                                 "that fits)."})
    on_error = ma.fields.String(
        load_default=states.ON_ERROR_PAUSE,
        validate=ma.validate.OneOf(states.EVACUATION_ON_ERROR),
        metadata={"description": "When a server runs out of hosts: pause the rest, "
                                 "continue (PARTIAL), or revert what is in flight."})
    max_parallel = fields.Integer(
        load_default=8, validate=ma.validate.Range(min=1, max=MAX_PARALLEL_LIMIT),
        metadata={"description": "Moves under way at once."})
    fallback = ma.fields.String(
        load_default=states.FALLBACK_NONE,
        validate=ma.validate.OneOf(states.EVACUATION_FALLBACKS),
        metadata={"description": "drain: cold-migrate the servers that cannot go live."})
    reason = fields.Text(allow_none=True, validate=ma.validate.Length(max=255))


class EvacuationFieldsSchema(EvacuateFieldsSchema):
    """What an evacuation asks for: the hosts to empty and how."""

    hosts = _names(required=True, validate=[ma.validate.Length(min=1), _no_duplicates],
                   metadata={"description": "Names of the hosts to empty."})


class EvacuationCreateSchema(ma.Schema):
    """Body of POST /v2/admin/evacuations: ``{"evacuation": {...}}``."""

    evacuation = ma.fields.Nested(EvacuationFieldsSchema, required=True)


class HostEvacuateSchema(ma.Schema):
    """Body of POST /v2/admin/hosts/{name}/evacuate: ``{"evacuate": {...}}``."""

    evacuate = ma.fields.Nested(EvacuateFieldsSchema, required=True)


class EvacuationCreateArgsSchema(ma.Schema):
    """Query arguments of the POST routes that start an evacuation."""

    dry_run = ma.fields.Boolean(
        load_default=False,
        metadata={"description": "Only say where each server would go now (200); "
                                 "nothing is written."})


class EvacuationProgressSchema(ma.Schema):
    total = ma.fields.Integer(required=True)
    done = ma.fields.Integer(required=True)
    moving = ma.fields.Integer(required=True)
    pending = ma.fields.Integer(required=True, metadata={"description": "Not started yet."})
    failed = ma.fields.Integer(required=True)
    skipped = ma.fields.Integer(required=True)
    reverted = ma.fields.Integer(required=True, metadata={
        "description": "Undone by a revert: the server stayed on its source."})


class EvacuationInstanceSchema(ma.Schema):
    """One server's move."""

    id = ma.fields.String(required=True, metadata={"description": "The server's uuid."})
    tenant_id = ma.fields.String(required=True)
    source = ma.fields.String(required=True)
    destination = ma.fields.String(allow_none=True)
    status = ma.fields.String(required=True,
                              metadata={"description": " | ".join(states.MOVE_STATUSES)})
    mode = ma.fields.String(metadata={"description": "rebuild | live | cold (drain's "
                                                     "fallback may turn live into cold)."})
    step = ma.fields.String(allow_none=True,
                            metadata={"description": "claim | move | attach | confirm."})
    attempts = ma.fields.Integer(required=True)
    hosts_tried = ma.fields.List(ma.fields.String(), required=True)
    volumes_lost = ma.fields.List(ma.fields.String(), required=True,
                                  metadata={"description": "Volumes the destination could "
                                                           "not reach."})
    fault = ma.fields.Nested(FaultSchema, allow_none=True)


class EvacuationListItemSchema(ma.Schema):
    """An evacuation in a list: everything but its servers."""

    id = ma.fields.String(required=True, metadata={"description": "e-..."})
    hosts = ma.fields.List(ma.fields.String(), required=True)
    mode = ma.fields.String(required=True)
    status = ma.fields.String(required=True,
                              metadata={"description": " | ".join(states.EVACUATION_STATUSES)})
    on_error = ma.fields.String(required=True)
    max_parallel = ma.fields.Integer()
    fallback = ma.fields.String()
    target_hosts = ma.fields.List(ma.fields.String(), allow_none=True)
    flow_id = ma.fields.String(allow_none=True, metadata={"description": "The current run."})
    reason = ma.fields.String(allow_none=True)
    created_at = fields.UtcDateTime()
    updated_at = fields.UtcDateTime()
    progress = ma.fields.Nested(EvacuationProgressSchema, required=True)
    fault = ma.fields.Nested(FaultSchema, allow_none=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class EvacuationSchema(EvacuationListItemSchema):
    """An evacuation with the move of each of its servers."""

    instances = ma.fields.List(ma.fields.Nested(EvacuationInstanceSchema), required=True)


class EvacuationResponseSchema(ma.Schema):
    evacuation = ma.fields.Nested(EvacuationSchema, required=True)


class EvacuationListSchema(ma.Schema):
    evacuations = ma.fields.List(ma.fields.Nested(EvacuationListItemSchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class EvacuationQueryArgsSchema(PaginationArgsSchema):
    """Newest first; the marker is an evacuation id."""

    status = ma.fields.String(validate=ma.validate.OneOf(states.EVACUATION_STATUSES))
    host = ma.fields.String(validate=HOST_NAME,
                            metadata={"description": "Evacuations of this host."})


class EvacuationSummarySchema(ma.Schema):
    """What the POST routes answer: where to follow the evacuation."""

    id = ma.fields.String(required=True)
    status = ma.fields.String(required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class EvacuationSummaryResponseSchema(ma.Schema):
    evacuation = ma.fields.Nested(EvacuationSummarySchema, required=True)


class EvacuationDryRunInstanceSchema(ma.Schema):
    id = ma.fields.String(required=True)
    tenant_id = ma.fields.String(required=True)
    source = ma.fields.String(required=True)
    destination = ma.fields.String(allow_none=True,
                                   metadata={"description": "None: no host fits now."})
    explanation = ma.fields.String(allow_none=True,
                                   metadata={"description": "Why no host fits."})


class EvacuationDryRunSchema(ma.Schema):
    """Where each server would go now; nothing is claimed or written."""

    fits = ma.fields.Boolean(required=True,
                             metadata={"description": "Every server found a host."})
    instances = ma.fields.List(ma.fields.Nested(EvacuationDryRunInstanceSchema),
                               required=True)


class EvacuationDryRunResponseSchema(ma.Schema):
    evacuation = ma.fields.Nested(EvacuationDryRunSchema, required=True)


class EvacuationActionSchema(ma.Schema):
    """Body of resume and revert: ``{}``."""


class EvacuationSkipFieldsSchema(ma.Schema):
    instances = ma.fields.List(
        fields.Name(validate=ma.validate.Length(min=1, max=36)), required=True,
        validate=[ma.validate.Length(min=1), _once_each("a server")],
        metadata={"description": "Uuids of unfinished servers to leave where they are."})


class EvacuationSkipSchema(ma.Schema):
    """Body of skip: ``{"skip": {"instances": [uuid, ...]}}``."""

    skip = ma.fields.Nested(EvacuationSkipFieldsSchema, required=True)
