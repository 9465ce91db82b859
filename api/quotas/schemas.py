"""Schemas of the quota routes: per project limits on instances, vcpus, RAM and volumes."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api import fields

LIMIT_HELP = "-1: no limit."
GIGABYTES_HELP = "Total size of the volumes, in GB; " + LIMIT_HELP
RESOURCES = ("instances", "vcpus", "ram_mb", "volumes", "gigabytes")


class UsageSchema(ma.Schema):
    """What the project's live instances and volumes (not deleted, not reverted) take now."""

    instances = ma.fields.Integer(required=True)
    vcpus = ma.fields.Integer(required=True)
    ram_mb = ma.fields.Integer(required=True)
    volumes = ma.fields.Integer(required=True)
    gigabytes = ma.fields.Integer(required=True,
                                  metadata={"description": "Sum of the volumes' sizes."})


class QuotaSchema(ma.Schema):
    """A project's limits (its own, or the configured defaults) and its usage."""

    tenant_id = ma.fields.String(required=True)
    instances = ma.fields.Integer(required=True, metadata={"description": LIMIT_HELP})
    vcpus = ma.fields.Integer(required=True, metadata={"description": LIMIT_HELP})
    ram_mb = ma.fields.Integer(required=True, metadata={"description": LIMIT_HELP})
    volumes = ma.fields.Integer(required=True, metadata={"description": LIMIT_HELP})
    gigabytes = ma.fields.Integer(required=True, metadata={"description": GIGABYTES_HELP})
    default = ma.fields.Boolean(required=True,
                                metadata={"description": "True while the project has no "
                                                         "limits of its own."})
    usage = ma.fields.Nested(UsageSchema, required=True)


class QuotaResponseSchema(ma.Schema):
    quota = ma.fields.Nested(QuotaSchema, required=True)


class QuotaLimitsSchema(ma.Schema):
    """The limits to set (at least one); a limit not given keeps its current value."""

    JSON_SCHEMA = {"minProperties": 1}

    instances = fields.Integer(validate=ma.validate.Range(min=-1),
                               metadata={"description": LIMIT_HELP})
    vcpus = fields.Integer(validate=ma.validate.Range(min=-1),
                           metadata={"description": LIMIT_HELP})
    ram_mb = fields.Integer(validate=ma.validate.Range(min=-1),
                            metadata={"description": LIMIT_HELP})
    volumes = fields.Integer(validate=ma.validate.Range(min=-1),
                             metadata={"description": LIMIT_HELP})
    gigabytes = fields.Integer(validate=ma.validate.Range(min=-1),
                               metadata={"description": GIGABYTES_HELP})

    @ma.validates_schema
    def needs_one(self, data, **kwargs):
        if not data:
            raise ma.ValidationError("give at least one of " + ", ".join(RESOURCES))


class QuotaUpdateSchema(ma.Schema):
    """Body of PUT /v2/admin/quotas/{tenant_id}: ``{"quota": {"instances": 10, ...}}``."""

    quota = ma.fields.Nested(QuotaLimitsSchema, required=True)
