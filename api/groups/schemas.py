"""Schemas of the server group routes."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api import fields
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.api.reservations.schemas import valid_requirements
from fleetflow.services.groups import POLICIES, SCOPES

POLICIES_HELP = ("Placement rules of the members: " + ", ".join(POLICIES)
                 + ". Empty: no constraint.")
# Attributes a client may never set: the server makes them (id, members).
READ_ONLY = ("id", "members")


def _members(group) -> list[str]:
    return sorted(member.instance_id for member in group.members)


class GroupSchema(ma.Schema):
    """A server group as the API shows it."""

    id = ma.fields.String(required=True, metadata={"description": "Generated UUID."})
    name = ma.fields.String(allow_none=True)
    tenant_id = ma.fields.String(required=True)
    policies = ma.fields.List(ma.fields.String(), required=True,
                              metadata={"description": POLICIES_HELP})
    scope = ma.fields.String(required=True,
                             metadata={"description": "Where (anti-)affinity applies: "
                                                      + " | ".join(SCOPES)})
    max_per_host = ma.fields.Integer(allow_none=True)
    metadata = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.String(),
                              attribute="metadata_")
    capabilities = ma.fields.Dict(
        keys=ma.fields.String(), values=ma.fields.String(),
        metadata={"description": "Host capabilities every member's host must have "
                                 "(host-capabilities policy), e.g. {\"gpu\": \"true\"}."})
    members = ma.fields.Function(
        _members, metadata={"description": "Read-only: instance uuids of the members. "
                                           "Instances join with a reservation's group_id "
                                           "and leave when deleted."})
    created_at = fields.UtcDateTime()
    updated_at = fields.UtcDateTime()


class GroupResponseSchema(ma.Schema):
    group = ma.fields.Nested(GroupSchema, required=True)


class GroupListSchema(ma.Schema):
    groups = ma.fields.List(ma.fields.Nested(GroupSchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class GroupQueryArgsSchema(PaginationArgsSchema):
    """Sorted by id; the marker is a group id."""

    name = ma.fields.String(metadata={"description": "Only groups of this name."})


class GroupFieldsSchema(ma.Schema):
    """Fields a client may send, with the read-only ones refused by name."""

    name = fields.Name(allow_none=True, validate=ma.validate.Length(max=255))
    tenant_id = fields.Name(
        metadata={"description": "Optional; must be the project of the path."})
    policies = ma.fields.List(fields.Name(), metadata={"description": POLICIES_HELP})
    scope = ma.fields.String(validate=ma.validate.OneOf(SCOPES))
    max_per_host = fields.Integer(allow_none=True, validate=ma.validate.Range(min=1))
    metadata = ma.fields.Dict(keys=fields.Name(validate=ma.validate.Length(max=255)),
                              values=ma.fields.String(validate=ma.validate.Length(max=255)),
                              allow_none=True)
    capabilities = ma.fields.Dict(keys=fields.Name(), values=ma.fields.String(),
                                  validate=valid_requirements)
    # NOTE: declared only to refuse them with a message that says why; an
    # unknown-field error would hide that the attribute exists but is read-only.
    id = ma.fields.Raw(metadata={
        "type": "string", "readOnly": True,
        "description": "Read-only: the server generates it; sending it is a 400."})
    members = ma.fields.Raw(metadata={
        "type": "array", "items": {"type": "string"}, "readOnly": True,
        "description": "Read-only: instances join with a reservation's group_id; "
                       "sending it is a 400."})

    @ma.validates_schema
    def refuse_read_only(self, data, **kwargs):
        for name in READ_ONLY:
            if name in data:
                raise ma.ValidationError(
                    f"{name} is read-only: membership follows reservations' group_id "
                    "and instance deletion" if name == "members" else
                    f"{name} is read-only: the server generates it", field_name=name)


class GroupCreateFieldsSchema(GroupFieldsSchema):
    policies = ma.fields.List(fields.Name(), load_default=list,
                              metadata={"description": POLICIES_HELP})
    scope = ma.fields.String(validate=ma.validate.OneOf(SCOPES),
                             load_default="host")


class GroupCreateSchema(ma.Schema):
    """Body of POST .../groups: ``{"group": {"name": ..., "policies": [...], ...}}``."""

    group = ma.fields.Nested(GroupCreateFieldsSchema, required=True)


class GroupUpdateSchema(ma.Schema):
    """Body of PUT .../groups/{id}: the attributes to change (others stay as they are).

    ``name`` and ``metadata`` change at any time; ``policies``, ``scope``,
    ``max_per_host`` and ``capabilities`` only while the group is empty (409
    otherwise), unless they are sent unchanged.
    """

    group = ma.fields.Nested(GroupFieldsSchema, required=True)
