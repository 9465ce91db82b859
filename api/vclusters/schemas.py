"""Schemas of the virtual cluster routes: servers, volumes, groupings.

A member's ``spec`` is one schema for both kinds, documented field by field
(servers: ``imageRef``, ``flavorRef``, ``capabilities``; volumes: ``size``,
``volume_type``, ``attachTo``); :class:`VClusterInstanceSchema` refuses the other
kind's fields as unknown and asks for its own required ones, so every error
names the field as ``vcluster.instances.<n>.spec.<field>``.

Names and references are 1 to 255 characters (the columns' size) without control
characters; one request lists at most ``[api] max_reservation_count`` instances,
as many groupings, and as many members per grouping.
"""

from __future__ import annotations

import flask
import marshmallow as ma

from fleetflow.api import fields, hosts_view, xml
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.api.reservations.schemas import (
    CAPABILITY_HELP,
    CapabilityValue,
    FaultSchema,
    QueueFieldsSchema,
    QueuePositionSchema,
    valid_requirements,
)
from fleetflow.api.state import current_state
from fleetflow.common import states

MAX_NAME = 255  # the name columns' size
# The volume size column is a 32-bit integer on PostgreSQL: a larger size
# would fail on insert (a 500) when the project's gigabytes quota is -1.
MAX_VOLUME_GB = 2**31 - 1
RULES = ("affinity", "anti-affinity")
SCOPES = ("host", "rack", "zone", "backend")
SERVER_FIELDS = ("imageRef", "flavorRef", "capabilities")
VOLUME_FIELDS = ("size", "volume_type", "attachTo")
REQUIRED = {states.MEMBER_SERVER: ("imageRef", "flavorRef"),
            states.MEMBER_VOLUME: ("size",)}
UNKNOWN = ma.Schema._default_error_messages["unknown"]
MISSING = ma.fields.Field.default_error_messages["required"]


def _text(min_length: int = 0, **kwargs) -> fields.Name:
    """A name of at most MAX_NAME characters (the columns' size)."""
    return fields.Name(validate=ma.validate.Length(min=min_length, max=MAX_NAME), **kwargs)


def _name(description: str, **kwargs) -> ma.fields.String:
    return _text(1, metadata={"description": description}, **kwargs)


def max_members() -> int:
    """Most members (and groupings) one request may list: ``[api] max_reservation_count``."""
    return current_state().conf.api.max_reservation_count


def _check_count(data: dict, field: str) -> None:
    limit = max_members()
    if len(data.get(field) or ()) > limit:
        raise ma.ValidationError(f"at most {limit} per request", field_name=field)


# -- requests -----------------------------------------------------------------------


class VClusterMemberSpecSchema(ma.Schema):
    """What a member is: a server's image and flavor, or a volume's size and type."""

    imageRef = _name("Servers (required): image name or id.")
    flavorRef = _name("Servers (required): flavor name or id.")
    capabilities = ma.fields.Dict(
        keys=fields.Name(validate=ma.validate.Length(min=1)),
        values=CapabilityValue(), validate=valid_requirements,
        metadata={"description": "Servers: " + CAPABILITY_HELP})
    size = fields.Integer(
        validate=ma.validate.Range(min=1, max=MAX_VOLUME_GB),
        metadata={"description": "Volumes (required): size in GB."})
    volume_type = _text(
        metadata={"description": "Volumes: a type some storage backend offers; empty or "
                                 "left out: any."})
    attachTo = _name("Volumes: the name of a server of the cluster to attach it to "
                     "(an affinity grouping of just one server and this volume "
                     "attaches them too).")


class VClusterInstanceSchema(ma.Schema):
    """One member of the cluster: a server or a volume, by its name in the cluster."""

    name = _name("Unique in the cluster; groupings and attachTo refer to it.", required=True)
    type = ma.fields.String(required=True, validate=ma.validate.OneOf(states.MEMBER_KINDS))
    spec = ma.fields.Nested(VClusterMemberSpecSchema, required=True)

    @ma.validates_schema
    def check_spec_fits_type(self, data, **kwargs):
        kind, spec = data.get("type"), data.get("spec")
        if kind is None or spec is None:
            return
        other = VOLUME_FIELDS if kind == states.MEMBER_SERVER else SERVER_FIELDS
        errors = {name: [UNKNOWN] for name in other if name in spec}
        errors.update({name: [MISSING] for name in REQUIRED[kind] if name not in spec})
        if errors:
            raise ma.ValidationError({"spec": errors})


class VClusterGroupingSpecSchema(ma.Schema):
    rule = ma.fields.String(required=True, validate=ma.validate.OneOf(RULES))
    scope = ma.fields.String(
        validate=ma.validate.OneOf(SCOPES),
        metadata={"description": "Left out: each pair's default (servers: host; volumes "
                                 "and server-volume anti-affinity: rack)."})


class VClusterGroupingSchema(ma.Schema):
    """An affinity or anti-affinity rule over members of the cluster."""

    name = _name("Unique in the cluster.", required=True)
    membersRef = ma.fields.List(
        _text(1), required=True,
        validate=ma.validate.Length(min=1),
        metadata={"description": "Names of members (of this request or, in an update, "
                                 "already in the cluster)."})
    spec = ma.fields.Nested(VClusterGroupingSpecSchema, required=True)

    @ma.validates_schema
    def check_size(self, data, **kwargs):
        _check_count(data, "membersRef")


class VClusterMembersSchema(ma.Schema):
    """Members and groupings (at most ``[api] max_reservation_count`` of each)."""

    instances = ma.fields.List(ma.fields.Nested(VClusterInstanceSchema), required=True)
    groupings = ma.fields.List(ma.fields.Nested(VClusterGroupingSchema), load_default=list)

    @ma.validates_schema
    def check_counts(self, data, **kwargs):
        _check_count(data, "instances")
        _check_count(data, "groupings")


class VClusterFieldsSchema(VClusterMembersSchema, QueueFieldsSchema):
    """A cluster: its name, at least one member, and groupings over the members.

    ``when_full: queue``: a cluster that does not fit waits, QUEUED, until all
    of its members can be placed at once (docs/queue.md).

    Member names are unique in the cluster; a grouping's ``membersRef`` names
    only its members; groupings that contradict each other, or a volume
    attached to a volume, are a 400 naming them. At most
    ``[api] max_reservation_count`` members and as many groupings.
    """

    name = _name("The cluster's name.", required=True)
    instances = ma.fields.List(ma.fields.Nested(VClusterInstanceSchema), required=True,
                               validate=ma.validate.Length(min=1))


class VClusterCreateSchema(ma.Schema):
    """Body of POST .../vclusters: ``{"vcluster": {...}}``."""

    vcluster = ma.fields.Nested(VClusterFieldsSchema, required=True)


class VClusterCreateArgsSchema(ma.Schema):
    """Query arguments of POST .../vclusters."""

    dry_run = ma.fields.Boolean(
        load_default=False,
        metadata={"description": "Only say whether it fits now and where each member "
                                 "would go (200); claim and write nothing."})


class VClusterAddSchema(VClusterMembersSchema):
    """Body of POST .../vclusters/{id}/instances: ``{"instances": [...], "groupings": [...]}``.

    A grouping of a name the cluster has adds its members to it (same rule);
    ``instances`` may be empty when groupings are given (new rules over the
    members the cluster has).
    """

    @ma.validates_schema
    def check_not_empty(self, data, **kwargs):
        if not data["instances"] and not data["groupings"]:
            raise ma.ValidationError("nothing to add: give instances or groupings",
                                     field_name="instances")

    @ma.pre_load
    def unwrap_xml_root(self, data, **kwargs):
        # NOTE: an XML document has a single root, so the XML body is
        # <vcluster><instances>...</instances><groupings>...</groupings></vcluster>.
        if (xml.is_xml_request(flask.request) and isinstance(data, dict)
                and list(data) == ["vcluster"]):
            return data["vcluster"]
        return data


class VClusterRenameFieldsSchema(ma.Schema):
    name = _name("The cluster's new name.", required=True)


class VClusterRenameSchema(ma.Schema):
    """Body of PUT .../vclusters/{id}: ``{"vcluster": {"name": ...}}``."""

    vcluster = ma.fields.Nested(VClusterRenameFieldsSchema, required=True)


class VClusterQueryArgsSchema(PaginationArgsSchema):
    """Oldest first; the marker is a vcluster id."""

    status = ma.fields.String(validate=ma.validate.OneOf(states.VCLUSTER_STATUSES))


# -- responses ----------------------------------------------------------------------


STATUS_HELP = " | ".join(states.VCLUSTER_STATUSES)
HOST_HELP = "Servers only (null to callers the policy rule servers:show_host refuses)."
BACKEND_HELP = "Volumes only (null to callers the policy rule servers:show_host refuses)."
MEMBER_HOST_ID_HELP = ("Opaque id of the server's host or the volume's backend, shown to "
                       "every caller: sha224 hex of the project id and the name, as "
                       "Nova's hostId (equal places, equal ids).")


class VClusterSummarySchema(ma.Schema):
    """What the changing routes answer (202): where to follow the cluster."""

    id = ma.fields.String(required=True, metadata={"description": "vc-..."})
    status = ma.fields.String(required=True, metadata={"description": STATUS_HELP})
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class VClusterSummaryResponseSchema(ma.Schema):
    vcluster = ma.fields.Nested(VClusterSummarySchema, required=True)


class VClusterProgressSchema(ma.Schema):
    total = ma.fields.Integer(required=True)
    active = ma.fields.Integer(required=True,
                               metadata={"description": "Servers ACTIVE, volumes AVAILABLE "
                                                        "or IN-USE."})
    building = ma.fields.Integer(required=True,
                                 metadata={"description": "Pending, scheduling, building, "
                                                          "creating, reverting or deleting."})
    error = ma.fields.Integer(required=True)


class VClusterMemberSchema(ma.Schema):
    """A member where it is now: ``host`` for a server, ``backend`` for a volume."""

    name = ma.fields.String(required=True)
    type = ma.fields.String(required=True, metadata={"description": "server | volume"})
    id = ma.fields.String(required=True, metadata={"description": "The server's or the "
                                                                  "volume's uuid."})
    status = ma.fields.String(allow_none=True)
    host = hosts_view.HostName(allow_none=True, metadata={"description": HOST_HELP})
    backend = hosts_view.HostName(allow_none=True, metadata={"description": BACKEND_HELP})
    host_id = hosts_view.PlaceOfMember(metadata={"description": MEMBER_HOST_ID_HELP})
    attached_to = ma.fields.String(allow_none=True,
                                   metadata={"description": "Volumes: the member name of "
                                                            "the server it is attached to."})
    fault = ma.fields.Nested(FaultSchema, allow_none=True)


class VClusterGroupingStateSchema(ma.Schema):
    """A grouping and whether it holds where its members are now."""

    name = ma.fields.String(required=True)
    rule = ma.fields.String(required=True)
    scope = ma.fields.String(allow_none=True)
    membersRef = ma.fields.List(ma.fields.String(), required=True)
    satisfied = ma.fields.Boolean(required=True)
    domains = ma.fields.Dict(
        keys=ma.fields.String(), values=hosts_view.Place(allow_none=True),
        metadata={"description": "Member -> its domain at the grouping's scope (a host, "
                                 "a backend, region/zone/rack or region/zone); null while "
                                 "it has no place. To callers servers:show_host refuses, "
                                 "the domain's opaque id (equal domains, equal ids)."})


class VClusterListItemSchema(ma.Schema):
    """A cluster in a list: everything but its members and groupings."""

    id = ma.fields.String(required=True)
    name = ma.fields.String(required=True)
    status = ma.fields.String(required=True, metadata={"description": STATUS_HELP})
    flow_id = ma.fields.String(allow_none=True, metadata={"description": "The current run."})
    created_at = fields.UtcDateTime()
    updated_at = fields.UtcDateTime()
    progress = ma.fields.Nested(VClusterProgressSchema, required=True)
    fault = ma.fields.Nested(FaultSchema, allow_none=True)
    queue = ma.fields.Nested(QueuePositionSchema, allow_none=True,
                             metadata={"description": "While QUEUED; null otherwise."})


class VClusterListEntrySchema(VClusterListItemSchema):
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class VClusterSchema(VClusterListItemSchema):
    """A cluster with every member where it landed and every grouping's state."""

    instances = ma.fields.List(ma.fields.Nested(VClusterMemberSchema), required=True)
    groupings = ma.fields.List(ma.fields.Nested(VClusterGroupingStateSchema), required=True)


class VClusterResponseSchema(ma.Schema):
    vcluster = ma.fields.Nested(VClusterSchema, required=True)


class VClusterListSchema(ma.Schema):
    vclusters = ma.fields.List(ma.fields.Nested(VClusterListEntrySchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class VClusterDryRunMemberSchema(ma.Schema):
    name = ma.fields.String(required=True)
    type = ma.fields.String(required=True)
    host = hosts_view.HostName(allow_none=True, metadata={"description": HOST_HELP})
    backend = hosts_view.HostName(allow_none=True, metadata={"description": BACKEND_HELP})
    host_id = hosts_view.PlaceOfMember(metadata={"description": MEMBER_HOST_ID_HELP})
    alternates = ma.fields.List(hosts_view.Place(),
                                metadata={"description": "Where a failed build would try "
                                                         "next (host_ids to callers "
                                                         "servers:show_host refuses)."})
    attached_to = ma.fields.String(allow_none=True)


class VClusterDryRunSchema(ma.Schema):
    """Answer of ``POST .../vclusters?dry_run=true``: the scheduler's verdict, now."""

    fits = ma.fields.Boolean(required=True, metadata={"description": "Every member would "
                                                                     "be placed."})
    explanation = ma.fields.String(
        allow_none=True, metadata={"description": "Which grouping or filter stopped the "
                                                  "pass."})
    instances = ma.fields.List(ma.fields.Nested(VClusterDryRunMemberSchema), required=True)
    groupings = ma.fields.List(ma.fields.Nested(VClusterGroupingStateSchema), required=True)

    @ma.post_dump(pass_original=True)
    def hide_names(self, data, original, **kwargs):
        """The explanation names no place the caller may not see."""
        names = set()
        for member in original.get("instances") or ():
            names.update([member.get("host"), member.get("backend"),
                          *member.get("alternates", ())])
        for grouping in original.get("groupings") or ():
            names.update((grouping.get("domains") or {}).values())
        data["explanation"] = hosts_view.current().text(data.get("explanation"), names)
        return data


class VClusterDryRunResponseSchema(ma.Schema):
    dry_run = ma.fields.Nested(VClusterDryRunSchema, required=True)
