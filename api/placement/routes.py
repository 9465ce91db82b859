"""``blp``: the /placement blueprint with every view attached (see api/app.py)."""

from fleetflow.api.placement import (  # noqa: F401
    aggregates,
    allocation_views,
    http_rules,
    inventories,
    provider_views,
    reshaper,
    resource_classes,
    traits,
)
from fleetflow.api.placement.blueprint import blp

__all__ = ["blp"]
