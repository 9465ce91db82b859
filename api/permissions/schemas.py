"""Schemas of the permissions route."""

from __future__ import annotations

import marshmallow as ma


class PermissionsSchema(ma.Schema):
    """The policy's answer, rule by rule, for the caller in the project of the path."""

    project_id = ma.fields.String(required=True,
                                  metadata={"description": "The project of the path."})
    roles = ma.fields.List(ma.fields.String(), required=True,
                           metadata={"description": "The caller's roles."})
    allowed = ma.fields.List(
        ma.fields.String(), required=True,
        metadata={"description": "The route rules (``reservations:create`` ...) the caller "
                                 "passes on this project, sorted."})
    denied = ma.fields.List(
        ma.fields.String(), required=True,
        metadata={"description": "The route rules the caller does not pass, sorted."})


class PermissionsResponseSchema(ma.Schema):
    permissions = ma.fields.Nested(PermissionsSchema, required=True)
