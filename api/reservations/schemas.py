"""Schemas of the reservation routes: N instances asked for together."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api import fields, hosts_view
from fleetflow.api.common import MAX_LIMIT, LinkSchema, PaginationArgsSchema
from fleetflow.common import states
from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import capabilities as caps
from fleetflow.services.reservations import ON_ERROR_CHOICES, ON_ERROR_REVERT

# The volume size column is a 32-bit integer on PostgreSQL.
MAX_VOLUME_GB = 2**31 - 1
CAPABILITY_HELP = ("Host capabilities each instance needs: a value (\"true\") or an operator "
                   "and a value (\">= 4\", \"in a b\", \"s== blue\", \"!= old\").")


class QueueFieldsSchema(ma.Schema):
    """Whether a request that does not fit now fails or waits (reservations, vclusters)."""

    when_full = ma.fields.String(
        load_default=states.WHEN_FULL_FAIL, validate=ma.validate.OneOf(states.WHEN_FULL_CHOICES),
        metadata={"description": "What happens when it does not fit now: 'fail' "
                                 "(NO_VALID_HOST) or 'queue': it waits, QUEUED and holding "
                                 "nothing, until all of it (a reservation's min_count for "
                                 "best-effort) fits at once (docs/queue.md)."})
    queue_timeout = ma.fields.Float(
        allow_none=True, load_default=None,
        validate=ma.validate.Range(min=0, min_inclusive=False, max=10 * 365 * 86400),
        metadata={"description": "Seconds it may wait queued; then it ends EXPIRED with the "
                                 "last placement explanation (default: [queue] "
                                 "default_timeout; none: no limit)."})
    priority = fields.Integer(
        load_default=0, validate=ma.validate.Range(min=0),
        metadata={"description": "Queue priority, higher first, 0 to [queue] max_priority."})


class CapabilityValue(ma.fields.Field):
    """A capability requirement: a string, or a JSON scalar read as its string.

    ``{"gpu": true}`` and ``{"gpu": "true"}`` mean the same, as hosts' capabilities
    are compared as strings (Nova's extra specs are strings too).
    """

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str | int | float):
            return str(value)
        raise self.make_error("invalid")

    default_error_messages = {"invalid": "Must be a string, a number or a boolean."}


def valid_requirements(value: dict) -> None:
    """Refuse a requirement the scheduler could not parse, naming its key.

    Checked when the request arrives, so a malformed one is a 400 at once
    rather than a flow that fails at its schedule step.
    """
    errors = {}
    for key, raw in value.items():
        try:
            caps.parse_requirement(str(key), raw)
        except InvalidInput as exc:
            errors[key] = [exc.message.removeprefix(f"capabilities.{key}: ")]
    if errors:
        raise ma.ValidationError(errors)


class ReservationFieldsSchema(QueueFieldsSchema):
    """What a reservation asks for. Give ``count``, or ``min_count`` and/or ``max_count``.

    Not both forms; ``min_count`` <= ``max_count`` (``min_count`` defaults to 1,
    ``max_count`` to ``min_count``); at most ``[api] max_reservation_count``
    (1000 by default) instances. Flavor, image and group must exist (400
    naming the field); the project's quota must hold the whole request (403).
    """

    name = fields.Name(allow_none=True, validate=ma.validate.Length(max=200))
    count = fields.Integer(validate=ma.validate.Range(min=1),
                           metadata={"description": "Exactly this many (min = max)."})
    min_count = fields.Integer(
        validate=ma.validate.Range(min=1),
        metadata={"description": "Fewest acceptable (best-effort keeps a result of at least "
                                 "this many). Defaults to 1 when only max_count is given."})
    max_count = fields.Integer(
        validate=ma.validate.Range(min=1),
        metadata={"description": "Most to build. Defaults to min_count."})
    flavor_ref = fields.Name(required=True, validate=ma.validate.Length(min=1, max=255),
                             metadata={"description": "Flavor name or id."})
    image_ref = fields.Name(required=True, validate=ma.validate.Length(min=1, max=255),
                            metadata={"description": "Image name or id."})
    capabilities = ma.fields.Dict(keys=fields.Name(validate=ma.validate.Length(min=1)),
                                  values=CapabilityValue(), load_default=dict,
                                  validate=valid_requirements,
                                  metadata={"description": CAPABILITY_HELP})
    group_id = fields.Name(allow_none=True,
                           metadata={"description": "Server group uuid (the scheduler "
                                                    "hint group=UUID)."})
    policy = ma.fields.String(load_default=states.ALL_OR_NOTHING,
                              validate=ma.validate.OneOf(states.FAILURE_POLICIES))
    on_error = ma.fields.String(
        load_default=ON_ERROR_REVERT, validate=ma.validate.OneOf(ON_ERROR_CHOICES),
        metadata={"description": "What a failure that no other host absorbs does: "
                                 "'revert' undoes the reservation (all-or-nothing; "
                                 "best-effort keeps what booted); 'pause' stops its flow "
                                 "before anything is undone (status PAUSED) for an "
                                 "operator to resume or revert at /v2/admin/flows/{id}."})
    volume_gb = fields.Integer(
        allow_none=True, validate=ma.validate.Range(min=1, max=MAX_VOLUME_GB),
        metadata={"description": "A data volume of this size per instance, on a storage "
                                 "backend its host reaches (a dry run counts it too)."})

    metadata = fields.server_metadata(load_default=dict)

    @ma.validates_schema
    def check_counts(self, data, **kwargs):
        if "count" in data and ("min_count" in data or "max_count" in data):
            raise ma.ValidationError("give count, or min_count/max_count, not both",
                                     field_name="count")
        if not {"count", "min_count", "max_count"} & set(data):
            raise ma.ValidationError("how many instances: give count, or min_count "
                                     "and/or max_count", field_name="count")
        if data.get("min_count", 1) > data.get("max_count", data.get("min_count", 1)):
            raise ma.ValidationError("must not exceed max_count", field_name="min_count")

    @ma.post_load
    def resolve_counts(self, data, **kwargs):
        """Turn the two forms into one: ``min_count`` and ``max_count``."""
        count = data.pop("count", None)
        if count is not None:
            data["min_count"] = data["max_count"] = count
        else:
            data.setdefault("min_count", 1)
            data.setdefault("max_count", data["min_count"])
        return data


class ReservationCreateSchema(ma.Schema):
    """Body of POST .../reservations: ``{"reservation": {...}}``."""

    reservation = ma.fields.Nested(ReservationFieldsSchema, required=True)


class ReservationCreateArgsSchema(ma.Schema):
    """Query arguments of POST .../reservations."""

    dry_run = ma.fields.Boolean(
        load_default=False,
        metadata={"description": "Only say whether it fits now (200); claim and write "
                                 "nothing."})


class FaultSchema(ma.Schema):
    code = ma.fields.String(required=True)
    message = hosts_view.FreeText(required=True)
    step = ma.fields.String(allow_none=True, metadata={"description": "Failed task."})
    host = hosts_view.HostName(allow_none=True, metadata={
        "description": "Where it failed (null to callers servers:show_host refuses, and "
                       "the message names the host's host_id instead)."})


class ProgressSchema(ma.Schema):
    total = ma.fields.Integer(required=True)
    active = ma.fields.Integer(required=True)
    building = ma.fields.Integer(required=True,
                                 metadata={"description": "Pending, scheduling, building "
                                                          "or reverting."})
    error = ma.fields.Integer(required=True)
    reverted = ma.fields.Integer(required=True, metadata={"description": "Undone by a "
                                                                         "revert."})
    deleted = ma.fields.Integer(required=True, metadata={"description": "Deleted on request."})


class ReservationInstanceSchema(ma.Schema):
    """One instance as its reservation shows it."""

    id = ma.fields.String(required=True)
    name = ma.fields.String(required=True)
    host = hosts_view.HostName(allow_none=True, metadata={
        "description": "Where it is; null while unplaced and once every try was undone "
                       "(ERROR in a PARTIAL reservation), and to callers the policy rule "
                       "servers:show_host refuses."})
    host_id = hosts_view.HostId(attribute="host")
    status = ma.fields.String(required=True)
    task_state = ma.fields.String(allow_none=True)
    attempts = ma.fields.Integer(required=True)
    hosts_tried = ma.fields.List(hosts_view.Place(), required=True, metadata={
        "description": "Hosts it was claimed on and sent to, in order (a claim lost to "
                       "another request is no try); their host_ids to callers "
                       "servers:show_host refuses."})
    fault = ma.fields.Nested(FaultSchema, allow_none=True)


class ReservationSummarySchema(ma.Schema):
    """What POST and DELETE answer: where to follow the reservation."""

    id = ma.fields.String(required=True, metadata={"description": "r-..., never an instance "
                                                                  "id."})
    status = ma.fields.String(required=True,
                              metadata={"description": " | ".join(states.RESERVATION_STATUSES)})
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class ReservationSummaryResponseSchema(ma.Schema):
    reservation = ma.fields.Nested(ReservationSummarySchema, required=True)


class QueuePositionSchema(ma.Schema):
    """Where a QUEUED reservation or vcluster stands in the queue."""

    position = ma.fields.Integer(required=True, metadata={
        "description": "From 1, in priority-then-age order (backfill and fair share may "
                       "still admit a later one first)."})
    ahead = ma.fields.Integer(required=True)
    waiting_since = fields.UtcDateTime()
    last_attempt = fields.UtcDateTime(allow_none=True)
    why = ma.fields.String(allow_none=True, metadata={
        "description": "Why the last admission pass did not admit it: the dry run's "
                       "explanation, or the quota it would exceed."})


class ReservationListItemSchema(ma.Schema):
    """A reservation in a list: everything but its instances."""

    id = ma.fields.String(required=True)
    name = ma.fields.String(allow_none=True)
    status = ma.fields.String(required=True)
    policy = ma.fields.String(required=True)
    flow_id = ma.fields.String(allow_none=True)
    created_at = fields.UtcDateTime()
    updated_at = fields.UtcDateTime()
    progress = ma.fields.Nested(ProgressSchema, required=True)
    fault = ma.fields.Nested(FaultSchema, allow_none=True, metadata={
        "description": "ERROR or REVERTED: the fault that caused it; PARTIAL: how many "
                       "instances failed and why, by fault code; EXPIRED: QUEUE_TIMEOUT "
                       "with the last placement explanation."})
    queue = ma.fields.Nested(QueuePositionSchema, allow_none=True,
                             metadata={"description": "While QUEUED; null otherwise."})
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class ReservationSchema(ReservationListItemSchema):
    """A reservation with the state of each of its instances, a page of them at a time."""

    instances = ma.fields.List(ma.fields.Nested(ReservationInstanceSchema), metadata={
        "description": "A page of its instances, by index (instance_limit, instance_marker); "
                       "absent with instance_limit=0."})
    instance_links = ma.fields.List(ma.fields.Nested(LinkSchema), metadata={
        "description": "Only while more instances follow this page: the 'next' page's URL "
                       "(as 'links' of the list routes)."})


class ReservationResponseSchema(ma.Schema):
    reservation = ma.fields.Nested(ReservationSchema, required=True)


class ReservationListSchema(ma.Schema):
    reservations = ma.fields.List(ma.fields.Nested(ReservationListItemSchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class ReservationShowArgsSchema(ma.Schema):
    """Query arguments of GET .../reservations/{id}: which of its instances to show.

    By default the first ``[api] page_size`` (1000), so a reservation of that many
    or fewer shows them all, as before pagination; ``instance_links`` names the
    next page of a larger one.
    """

    instance_limit = ma.fields.Integer(
        validate=ma.validate.Range(min=0, max=MAX_LIMIT),
        metadata={"description": f"Instances per page (at most {MAX_LIMIT}; default "
                                 "[api] page_size). 0: none, only the reservation with "
                                 "its progress: the cheap form to poll while it builds."})
    instance_marker = ma.fields.String(
        validate=ma.validate.Length(min=1, max=36),
        metadata={"description": "Id of the last instance of the previous page (ignored "
                                 "with instance_limit=0)."})


class ReservationQueryArgsSchema(PaginationArgsSchema):
    """Sorted by id; the marker is a reservation id."""

    status = ma.fields.String(validate=ma.validate.OneOf(states.RESERVATION_STATUSES))


class DryRunSchema(ma.Schema):
    """Answer of ``POST .../reservations?dry_run=true``: the scheduler's verdict, now."""

    fits = ma.fields.Boolean(required=True, metadata={"description": "min_count would fit."})
    placed = ma.fields.Integer(metadata={"description": "Instances that found a host."})
    min_count = ma.fields.Integer()
    max_count = ma.fields.Integer()
    explanation = ma.fields.String(
        allow_none=True, metadata={"description": "Which filter removed how many hosts, "
                                                  "e.g. 'capabilities: 128 -> 9; "
                                                  "resources (DISK_GB): 9 -> 0'."})
    filters = ma.fields.List(ma.fields.Dict(), metadata={
        "description": "The filter chain: name, before, after, note, short_of (for "
                       "resources: the resource classes the removed hosts lacked)."})
    hosts = ma.fields.Dict(keys=hosts_view.Place(), values=ma.fields.Integer(),
                           metadata={"description": "Instances per chosen host (by host_id "
                                                    "to callers servers:show_host "
                                                    "refuses)."})

    @ma.post_dump(pass_original=True)
    def hide_names(self, data, original, **kwargs):
        """Explanations name no host the caller may not see."""
        names = list(original.get("hosts") or ())
        view = hosts_view.current()
        data["explanation"] = view.text(data.get("explanation"), names)
        for step in data.get("filters") or ():
            if isinstance(step.get("note"), str):
                step["note"] = view.text(step["note"], names)
        return data


class DryRunResponseSchema(ma.Schema):
    dry_run = ma.fields.Nested(DryRunSchema, required=True)
