"""Flavors a project can boot: list, and show by id or name."""

from __future__ import annotations

from fleetflow.api import catalog
from fleetflow.api.flavors import schemas
from fleetflow.services.catalog import find_flavor, flavor_page

blp = catalog.blueprint(catalog.Catalog(
    kind="flavor", plural="flavors", article="a",
    list_rule="flavors:list", show_rule="flavors:show",
    query_schema=schemas.FlavorQueryArgsSchema, list_schema=schemas.FlavorListSchema,
    item_schema=schemas.FlavorResponseSchema, page=flavor_page, find=find_flavor), __name__)
