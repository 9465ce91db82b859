"""Resource classes, the trait catalogue and provider aggregates (functions over a session).

Standard resource classes and traits are the ones os-resource-classes and
os-traits name, as in Placement; custom ones (``CUSTOM_*``) are rows. A
standard trait gets its row the first time a provider carries it (the
provider-trait foreign key needs one), which does not make it custom.
"""

from __future__ import annotations

import re

import os_resource_classes
import os_traits
import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.common.exceptions import NotFound
from fleetflow.persistence.placement import errors, snapshot
from fleetflow.persistence.placement.models import (
    Allocation,
    Inventory,
    ProviderAggregate,
    ProviderTrait,
    ResourceClass,
    ResourceProvider,
    Trait,
)
from fleetflow.persistence.placement.providers import bump_generation, get_provider

CUSTOM_PATTERN = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
STANDARD_CLASSES = tuple(os_resource_classes.STANDARDS)
STANDARD_TRAITS = frozenset(os_traits.get_traits())


class CatalogNotFound(NotFound):
    """No such resource class or trait."""

    code = errors.UNDEFINED


class ResourceClassInUse(errors.PlacementConflict):
    """A resource class that inventories still use cannot be deleted."""


class DuplicateResourceClass(errors.PlacementConflict):
    code = errors.DUPLICATE_NAME


class TraitInUse(errors.PlacementConflict):
    """A trait that providers still carry cannot be deleted."""


# -- resource classes --------------------------------------------------------------
def list_resource_classes(session: orm.Session) -> list[str]:
    custom = session.execute(sa.select(ResourceClass.name)
                             .order_by(ResourceClass.created_at, ResourceClass.name))
    return [*STANDARD_CLASSES, *custom.scalars()]


def resource_class_exists(session: orm.Session, name: str) -> bool:
    return name in STANDARD_CLASSES or session.get(ResourceClass, name) is not None


def get_resource_class(session: orm.Session, name: str) -> ResourceClass | None:
    """The custom class's row, None for a standard one; NotFound when neither."""
    if name in STANDARD_CLASSES:
        return None
    row = session.get(ResourceClass, name)
    if row is None:
        raise CatalogNotFound(f"No such resource class {name}.")
    return row


def create_resource_class(session: orm.Session, name: str) -> bool:
    """Create a custom class; False (nothing done) when it already exists."""
    if resource_class_exists(session, name):
        return False
    try:
        with session.begin_nested():
            session.add(ResourceClass(name=name))
    except sa.exc.IntegrityError:
        return False  # a concurrent creator won: it exists, as wanted
    return True


def rename_resource_class(session: orm.Session, name: str, new_name: str) -> None:
    """Placement's 1.2-1.6 PUT: a custom class takes a new custom name."""
    if name in STANDARD_CLASSES:
        raise errors.BadRequest(f"Cannot update standard resource class {name}")
    row = get_resource_class(session, name)
    if resource_class_exists(session, new_name):
        raise DuplicateResourceClass(f"Resource class already exists: {new_name}")
    session.delete(row)
    session.flush()
    session.add(ResourceClass(name=new_name, created_at=row.created_at))
    # No generation moves (as in Placement), yet the candidates' snapshot must see it.
    snapshot.touch(session, [*session.execute(
        sa.select(Inventory.resource_provider_uuid).where(Inventory.resource_class == name)
        .union(sa.select(Allocation.resource_provider_uuid)
               .where(Allocation.resource_class == name))).scalars()])
    for table in (Inventory, Allocation):
        session.execute(sa.update(table).where(table.resource_class == name)
                        .values(resource_class=new_name))


def delete_resource_class(session: orm.Session, name: str) -> None:
    if name in STANDARD_CLASSES:
        raise errors.BadRequest(f"Error in delete resource class: Cannot delete standard "
                                f"resource class {name}")
    row = get_resource_class(session, name)
    used = session.execute(sa.select(Inventory.resource_provider_uuid)
                           .where(Inventory.resource_class == name).limit(1)).first()
    if used is not None:
        raise ResourceClassInUse(f"Error in delete resource class: Cannot delete resource "
                                 f"class {name}. Class is in use in inventory.")
    session.delete(row)


# -- traits ----------------------------------------------------------------------
def list_traits(session: orm.Session, associated: bool | None = None) -> list[str]:
    """Every known trait; only those some provider has (or has not) with ``associated``."""
    stored = set(session.execute(sa.select(Trait.name)).scalars())
    names = STANDARD_TRAITS | stored
    if associated is not None:
        carried = set(session.execute(sa.select(ProviderTrait.trait).distinct()).scalars())
        names = {n for n in names if (n in carried) == associated}
    return sorted(names)


def trait_exists(session: orm.Session, name: str) -> bool:
    return name in STANDARD_TRAITS or session.get(Trait, name) is not None


def unknown_traits(session: orm.Session, names) -> list[str]:
    names = set(names) - STANDARD_TRAITS
    if not names:
        return []
    stored = set(session.execute(sa.select(Trait.name).where(Trait.name.in_(names))).scalars())
    return sorted(names - stored)


def delete_trait(session: orm.Session, name: str) -> None:
    if name in STANDARD_TRAITS:
        raise errors.BadRequest(f"Cannot delete standard trait {name}.")
    row = session.get(Trait, name)
    if row is None:
        raise CatalogNotFound(f"No such trait(s): {name}.")
    carried = session.execute(sa.select(ProviderTrait.resource_provider_uuid)
                              .where(ProviderTrait.trait == name).limit(1)).first()
    if carried is not None:
        raise TraitInUse(f"The trait {name} is in use by a resource provider.")
    session.delete(row)


# -- aggregates ----------------------------------------------------------------------
def get_aggregates(session: orm.Session, rp_uuid: str) -> tuple[int, list[str]]:
    row = get_provider(session, rp_uuid)
    found = session.execute(sa.select(ProviderAggregate.aggregate_uuid)
                            .where(ProviderAggregate.resource_provider_uuid == rp_uuid)
                            .order_by(ProviderAggregate.aggregate_uuid))
    return row.generation, list(found.scalars())


def set_aggregates(session: orm.Session, rp_uuid: str, aggregates: list[str],
                   generation: int | None) -> tuple[int, list[str]]:
    """Replace a provider's aggregates; with ``generation`` (1.19+) it is checked and bumped."""
    row = get_provider(session, rp_uuid)
    new_generation = row.generation
    if generation is not None:
        # Compared here, not in SQL: a client's number may not fit the column.
        if isinstance(generation, bool) or generation != row.generation:
            raise errors.ProviderGenerationConflict(
                f"resource provider generation conflict: expected {row.generation}, "
                f"got {generation}")
        new_generation = bump_generation(session, rp_uuid, row.generation)
    else:  # before 1.19 no generation moves, yet the candidates' snapshot must see it
        snapshot.touch(session, [rp_uuid])
    session.execute(sa.delete(ProviderAggregate)
                    .where(ProviderAggregate.resource_provider_uuid == rp_uuid))
    wanted = list(dict.fromkeys(aggregates))  # answered in the order given, as Placement
    if wanted:
        session.execute(sa.insert(ProviderAggregate), [
            {"resource_provider_uuid": rp_uuid, "aggregate_uuid": a} for a in wanted])
    session.expire(row)
    return new_generation, wanted


def provider_exists(session: orm.Session, rp_uuid: str) -> bool:
    return session.get(ResourceProvider, rp_uuid) is not None


def filter_providers(session: orm.Session, uuids: list[str], traits: list[set[str]],
                     refused_traits: set[str], aggregates: list[set[str]],
                     refused_aggregates: set[str]) -> set[str]:
    """Of ``uuids``, those with one trait of each group and one aggregate of each group,
    and none of the refused ones."""
    keep = set(uuids)
    if traits or refused_traits:
        keep = _holding(session, keep, ProviderTrait.trait, traits, refused_traits)
    if aggregates or refused_aggregates:
        keep = _holding(session, keep, ProviderAggregate.aggregate_uuid, aggregates,
                        refused_aggregates)
    return keep


def _holding(session, uuids: set[str], column, groups, refused: set[str]) -> set[str]:
    """Of ``uuids``, those with one value of ``column`` from each group and none refused."""
    owner = column.class_.resource_provider_uuid
    held: dict[str, set[str]] = {}
    for rp, value in session.execute(sa.select(owner, column)):
        held.setdefault(rp, set()).add(value)
    return {u for u in uuids
            if all(group & held.get(u, set()) for group in groups)
            and not refused & held.get(u, set())}


def providers_in_all(session: orm.Session, groups: list[set[str]]) -> set[str]:
    """Providers that are, for every group, a member of at least one of its aggregates."""
    members: set[str] | None = None
    for group in groups:
        found = set(session.execute(
            sa.select(ProviderAggregate.resource_provider_uuid)
            .where(ProviderAggregate.aggregate_uuid.in_(group))).scalars())
        members = found if members is None else members & found
    return members or set()
