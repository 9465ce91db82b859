"""The reshaper: inventories and allocations of several providers replaced at once.

Run inside one transaction (``PlacementStore.reshape``), as Placement's: every
provider generation is checked first; each provider then briefly holds the
union of its old and new inventories, so allocations can move onto classes
that are about to appear and off classes that are about to go; then the
allocations are replaced; then each provider gets exactly its new inventories.
Anything that fails rolls the whole reshape back.
"""

from __future__ import annotations

from sqlalchemy import orm

from fleetflow.persistence.placement import allocations as allocs
from fleetflow.persistence.placement import errors, providers


def reshape(session: orm.Session, inventories: dict[str, tuple[int, dict]],
            writes: list[allocs.ConsumerWrite], fence: dict | None = None) -> None:
    """``inventories``: ``{rp: (generation the caller read, {rc: inventory})}``."""
    for rp_uuid, (generation, _wanted) in inventories.items():
        row = providers.get_provider(session, rp_uuid)
        if row.generation != generation:
            raise errors.ProviderGenerationConflict(
                f"resource provider generation conflict for provider {rp_uuid}: actual: "
                f"{row.generation}, given: {generation}")
    for rp_uuid, (_generation, wanted) in inventories.items():
        if wanted:
            current_generation, current = providers.get_inventories(session, rp_uuid)
            providers.set_inventories(session, rp_uuid, current_generation,
                                      dict(current, **wanted))
    allocs.replace_allocations(session, writes, fence)
    session.expire_all()  # the allocation write bumped generations with Core statements
    for rp_uuid, (_generation, wanted) in inventories.items():
        current_generation, _current = providers.get_inventories(session, rp_uuid)
        providers.set_inventories(session, rp_uuid, current_generation, wanted)
