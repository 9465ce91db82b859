"""Images a project can boot: list, and show by id or name."""

from __future__ import annotations

from fleetflow.api import catalog
from fleetflow.api.images import schemas
from fleetflow.services.catalog import find_image, image_page

blp = catalog.blueprint(catalog.Catalog(
    kind="image", plural="images", article="an",
    list_rule="images:list", show_rule="images:show",
    query_schema=schemas.ImageQueryArgsSchema, list_schema=schemas.ImageListSchema,
    item_schema=schemas.ImageResponseSchema, page=image_page, find=find_image), __name__)
