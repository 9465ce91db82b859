"""``blp``: the /placement blueprint with every view attached (see api/app.py)."""

from fleetflow.api.placement import allocation_views, provider_views  # noqa: F401
from fleetflow.api.placement.blueprint import blp

__all__ = ["blp"]
