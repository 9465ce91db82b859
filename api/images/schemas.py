"""Schemas of the image routes."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api.common import LinkSchema, PaginationArgsSchema


class ImageSchema(ma.Schema):
    """A bootable image and the least a flavor must give it."""

    id = ma.fields.String(required=True)
    name = ma.fields.String(required=True)
    min_disk_gb = ma.fields.Integer(required=True)
    min_ram_mb = ma.fields.Integer(required=True)


class ImageResponseSchema(ma.Schema):
    image = ma.fields.Nested(ImageSchema, required=True)


class ImageListSchema(ma.Schema):
    images = ma.fields.List(ma.fields.Nested(ImageSchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class ImageQueryArgsSchema(PaginationArgsSchema):
    """Sorted by name; the marker is an image name."""
