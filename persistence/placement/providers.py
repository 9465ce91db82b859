"""Resource providers, their inventories and traits (functions over a session).

Every write that changes a provider's inventory or traits bumps its generation
with compare-and-swap, so a caller holding an old generation gets
:class:`ConcurrentUpdate` instead of silently overwriting a newer state.
"""

from __future__ import annotations

import logging
import re
import uuid as uuidlib

import os_resource_classes
import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.persistence.models import Host
from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.models import (
    MAX_INT,
    Allocation,
    Inventory,
    ProviderAggregate,
    ProviderTrait,
    ResourceProvider,
    Trait,
)

LOG = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[A-Z0-9_]+$")
# What the generation column (a signed 32-bit integer) holds.
GENERATION_MIN, GENERATION_MAX = -(2**31), 2**31 - 1
INVENTORY_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size",
                    "allocation_ratio")
INVENTORY_DEFAULTS = {"reserved": 0, "min_unit": 1, "max_unit": MAX_INT, "step_size": 1,
                      "allocation_ratio": 1.0}


def provider_dict(row) -> dict:
    """A provider as Placement shows it (links are added by the API)."""
    return {"uuid": row.uuid, "name": row.name, "generation": row.generation,
            "parent_provider_uuid": row.parent_provider_uuid,
            "root_provider_uuid": row.root_provider_uuid}


# A uuid already in its canonical form (all fleetflow itself sends) is returned
# as it is: parsing it cost 6 us, a tenth of a 10,000-consumer claim.
_CANONICAL_UUID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def canonical_uuid(value: str, what: str = "uuid") -> str:
    if isinstance(value, str) and _CANONICAL_UUID.match(value):
        return value
    try:
        return str(uuidlib.UUID(str(value)))
    except (ValueError, TypeError, AttributeError):
        raise errors.BadRequest(f"Malformed {what}: {value!r}") from None


def get_provider(session: orm.Session, rp_uuid: str) -> ResourceProvider:
    row = session.get(ResourceProvider, rp_uuid)
    if row is None:
        raise errors.ProviderNotFound(f"No resource provider with uuid {rp_uuid} found")
    return row


def list_providers(session: orm.Session, *, name: str | None = None,
                   uuid: str | None = None, in_tree: str | None = None) -> list:
    query = sa.select(ResourceProvider).order_by(ResourceProvider.name)
    if name is not None:
        query = query.where(ResourceProvider.name == name)
    if uuid is not None:
        query = query.where(ResourceProvider.uuid == uuid)
    if in_tree is not None:
        root = session.execute(sa.select(ResourceProvider.root_provider_uuid)
                               .where(ResourceProvider.uuid == in_tree)).scalar_one_or_none()
        if root is None:
            raise errors.BadRequest(f"Invalid uuid value: {in_tree}")
        query = query.where(ResourceProvider.root_provider_uuid == root)
    return list(session.execute(query).scalars())


def create_provider(session: orm.Session, name: str, rp_uuid: str | None = None,
                    parent_provider_uuid: str | None = None) -> ResourceProvider:
    """Create a provider; DuplicateProvider when its name or uuid is taken."""
    rp_uuid = canonical_uuid(rp_uuid) if rp_uuid else str(uuidlib.uuid4())
    root = rp_uuid
    if parent_provider_uuid:
        cannot = f'Unable to create resource provider "{name}", {rp_uuid}: '
        if parent_provider_uuid == rp_uuid:
            raise errors.BadRequest(cannot + "parent provider UUID cannot be same as UUID. "
                                    "Please set parent provider UUID to None if there is "
                                    "no parent.")
        parent = session.get(ResourceProvider, parent_provider_uuid)
        if parent is None:
            raise errors.BadRequest(cannot + "parent provider UUID does not exist.")
        root = parent.root_provider_uuid
    clash = session.execute(sa.select(ResourceProvider.uuid, ResourceProvider.name).where(
        sa.or_(ResourceProvider.uuid == rp_uuid, ResourceProvider.name == name))).first()
    if clash is not None:
        field = "uuid" if clash.uuid == rp_uuid else "name"
        raise errors.DuplicateProvider(
            f"Conflicting resource provider {field}: {rp_uuid if field == 'uuid' else name} "
            "already exists.")
    row = ResourceProvider(uuid=rp_uuid, name=name, generation=0,
                           parent_provider_uuid=parent_provider_uuid or None,
                           root_provider_uuid=root)
    try:
        # A savepoint: a concurrent creator of the same name must not poison
        # the caller's transaction (register_host runs inside the fleet loader's).
        with session.begin_nested():
            session.add(row)
    except sa.exc.IntegrityError:
        raise errors.DuplicateProvider(
            f"Conflicting resource provider {name} already exists.") from None
    return row


def update_provider(session: orm.Session, rp_uuid: str, name: str,
                    parent_provider_uuid: str | None = None,
                    allow_reparenting: bool = False) -> ResourceProvider:
    """Rename and (re-)parent a provider, as Placement (re-parenting from 1.37)."""
    row = get_provider(session, rp_uuid)
    if parent_provider_uuid != row.parent_provider_uuid:
        _move(session, row, parent_provider_uuid, allow_reparenting)
    if name != row.name:
        taken = session.execute(sa.select(ResourceProvider.uuid)
                                .where(ResourceProvider.name == name)).first()
        if taken is not None:
            raise errors.DuplicateProvider(f"Conflicting resource provider {name} "
                                           "already exists.")
        row.name = name
    session.flush()
    session.refresh(row)
    return row


def _move(session: orm.Session, row: ResourceProvider, parent_uuid: str | None,
          allow_reparenting: bool) -> None:
    """Give ``row`` a new parent (None: make it a root), its whole subtree following."""
    cannot = f"Unable to save resource provider {row.uuid}: "
    if parent_uuid is None:
        if not allow_reparenting:
            raise errors.BadRequest(cannot + "un-parenting a provider is not currently "
                                    "allowed.")
        new_root = row.uuid
    else:
        parent = session.get(ResourceProvider, parent_uuid)
        if parent is None:
            raise errors.BadRequest(cannot + "parent provider UUID does not exist.")
        if row.parent_provider_uuid is not None and not allow_reparenting:
            raise errors.BadRequest(cannot + "re-parenting a provider is not currently "
                                    "allowed.")
        if parent.uuid in _subtree(session, row):
            raise errors.BadRequest(cannot + "creating loop in the provider tree is not "
                                    "allowed.")
        new_root = parent.root_provider_uuid
    subtree = _subtree(session, row)
    row.parent_provider_uuid = parent_uuid
    session.execute(sa.update(ResourceProvider)
                    .where(ResourceProvider.uuid.in_(subtree))
                    .values(root_provider_uuid=new_root))


def _subtree(session: orm.Session, row: ResourceProvider) -> set[str]:
    """``row`` and every provider below it."""
    children: dict[str, list[str]] = {}
    for uuid, parent in session.execute(
            sa.select(ResourceProvider.uuid, ResourceProvider.parent_provider_uuid)
            .where(ResourceProvider.root_provider_uuid == row.root_provider_uuid)):
        children.setdefault(parent, []).append(uuid)
    found, todo = set(), [row.uuid]
    while todo:
        uuid = todo.pop()
        found.add(uuid)
        todo.extend(children.get(uuid, ()))
    return found


def delete_provider(session: orm.Session, rp_uuid: str) -> None:
    row = get_provider(session, rp_uuid)
    # A fleet host without its provider still reads up and empty to the
    # scheduler, and every claim on it fails: the host goes first.
    host = session.execute(sa.select(Host.name).where(Host.uuid == rp_uuid)).scalar()
    if host is not None:
        raise errors.ProviderIsFleetHost(
            f"Unable to delete resource provider {rp_uuid}: it is the provider of fleet "
            f"host {host}; retire or delete the host first.", host=host)
    in_use = session.execute(sa.select(Allocation.consumer_uuid).where(
        Allocation.resource_provider_uuid == rp_uuid).limit(1)).first()
    if in_use is not None:
        raise errors.ProviderInUse(f"Unable to delete resource provider {rp_uuid}: "
                                   "Resource provider has allocations.")
    child = session.execute(sa.select(ResourceProvider.uuid).where(
        ResourceProvider.parent_provider_uuid == rp_uuid).limit(1)).first()
    if child is not None:
        raise errors.CannotDeleteParent(f"Unable to delete parent resource provider "
                                        f"{rp_uuid}: It has child resource providers.")
    session.execute(sa.delete(ProviderTrait).where(
        ProviderTrait.resource_provider_uuid == rp_uuid))
    session.execute(sa.delete(Inventory).where(Inventory.resource_provider_uuid == rp_uuid))
    session.execute(sa.delete(ProviderAggregate).where(
        ProviderAggregate.resource_provider_uuid == rp_uuid))
    try:
        with session.begin_nested():
            session.delete(row)
    except sa.exc.IntegrityError:
        # An allocation was committed between our check and the delete.
        raise errors.ProviderInUse(f"Unable to delete resource provider {rp_uuid}: "
                                   "Resource provider has allocations.") from None


def bump_generation(session: orm.Session, rp_uuid: str, seen: int) -> int:
    """Compare-and-swap the provider generation from ``seen`` to ``seen + 1``."""
    if not GENERATION_MIN <= seen < GENERATION_MAX:
        # No stored generation is out there: stale, and SQL cannot even bind it.
        raise errors.ProviderGenerationConflict(
            f"resource provider generation conflict on {rp_uuid}: {seen} is no generation")
    result = session.execute(
        sa.update(ResourceProvider.__table__)
        .where(ResourceProvider.uuid == rp_uuid, ResourceProvider.generation == seen)
        .values(generation=seen + 1))
    if result.rowcount != 1:
        raise errors.ProviderGenerationConflict(
            f"resource provider generation conflict on {rp_uuid}: expected {seen}, "
            "another writer changed it")
    return seen + 1


def _check_generation(row: ResourceProvider, generation) -> None:
    if generation is None or int(generation) != row.generation:
        raise errors.ProviderGenerationConflict(
            f"resource provider generation conflict: expected {row.generation}, "
            f"got {generation}")


def get_inventories(session: orm.Session, rp_uuid: str) -> tuple[int, dict]:
    row = get_provider(session, rp_uuid)
    rows = session.execute(sa.select(Inventory).where(
        Inventory.resource_provider_uuid == rp_uuid)).scalars()
    return row.generation, {inv.resource_class: {f: getattr(inv, f) for f in INVENTORY_FIELDS}
                            for inv in rows}


def normalize_inventory(rc: str, spec: dict) -> dict:
    """Fill defaults and validate one resource class's inventory (BadRequest)."""
    if not NAME_PATTERN.match(rc or ""):
        raise errors.BadRequest(f"Invalid resource class name {rc!r}")
    if not isinstance(spec, dict):
        raise errors.BadRequest(f"Inventory of {rc}: must be an object, got {spec!r:.40}")
    unknown = set(spec) - set(INVENTORY_FIELDS)
    if unknown or "total" not in spec:
        raise errors.BadRequest(f"Inventory of {rc}: 'total' is required and "
                                f"{sorted(unknown)} are not allowed")
    inv = dict(INVENTORY_DEFAULTS, **spec)
    for field in INVENTORY_FIELDS[:-1]:
        value = inv[field]
        low = 0 if field == "reserved" else 1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_INT:
            raise errors.BadRequest(f"Inventory of {rc}: {field} must be an integer "
                                    f"between {low} and {MAX_INT}, got {value!r}")
    ratio = inv["allocation_ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or ratio <= 0:
        raise errors.BadRequest(f"Inventory of {rc}: allocation_ratio must be > 0")
    inv["allocation_ratio"] = float(ratio)
    if inv["reserved"] > inv["total"]:
        raise errors.BadRequest(f"Inventory of {rc}: reserved must not exceed total")
    if inv["min_unit"] > inv["max_unit"]:
        raise errors.BadRequest(f"Inventory of {rc}: min_unit must not exceed max_unit")
    return inv


def _class_order(rc: str) -> tuple[int, str]:
    """Standard classes in os-resource-classes' order (Placement's ids), then the rest."""
    try:
        return os_resource_classes.STANDARDS.index(rc), rc
    except ValueError:
        return len(os_resource_classes.STANDARDS), rc


def capacity(inv) -> int:
    """Usable amount: (total - reserved) * allocation_ratio, as Placement computes it."""
    get = inv.get if isinstance(inv, dict) else lambda f: getattr(inv, f)
    return int((get("total") - get("reserved")) * get("allocation_ratio"))


def set_inventories(session: orm.Session, rp_uuid: str, generation: int,
                    inventories: dict[str, dict]) -> tuple[int, dict]:
    """Replace every inventory of a provider; returns (new generation, inventories).

    A resource class that still has allocations cannot be removed
    (InventoryInUse). Lowering a total below what is allocated is allowed, as
    in Placement (the provider is then over capacity until usage drops; new
    allocations fail meanwhile) and logged.
    """
    row = get_provider(session, rp_uuid)
    _check_generation(row, generation)
    wanted = {rc: normalize_inventory(rc, spec) for rc, spec in inventories.items()}
    used = dict(session.execute(
        sa.select(Allocation.resource_class, sa.func.sum(Allocation.used))
        .where(Allocation.resource_provider_uuid == rp_uuid)
        .group_by(Allocation.resource_class)).all())
    removed_in_use = sorted((rc for rc, n in used.items() if n and rc not in wanted),
                            key=_class_order)
    if removed_in_use:
        raise errors.InventoryInUse(f"Inventory for '{', '.join(removed_in_use)}' on "
                                    f"resource provider '{rp_uuid}' in use.")
    for rc, inv in wanted.items():
        if used.get(rc, 0) > capacity(inv):
            LOG.warning("resource provider %s is now over capacity for %s", rp_uuid, rc)
    new_generation = bump_generation(session, rp_uuid, row.generation)
    session.execute(sa.delete(Inventory).where(Inventory.resource_provider_uuid == rp_uuid))
    if wanted:
        session.execute(sa.insert(Inventory), [
            dict(inv, resource_provider_uuid=rp_uuid, resource_class=rc)
            for rc, inv in wanted.items()])
    session.expire(row)
    return new_generation, wanted


def get_traits(session: orm.Session, rp_uuid: str) -> tuple[int, list[str]]:
    row = get_provider(session, rp_uuid)
    names = session.execute(sa.select(ProviderTrait.trait).where(
        ProviderTrait.resource_provider_uuid == rp_uuid).order_by(ProviderTrait.trait))
    return row.generation, list(names.scalars())


def ensure_traits(session: orm.Session, names) -> None:
    """Create the trait names that do not exist yet."""
    names = set(names)
    for name in names:
        if not NAME_PATTERN.match(name or ""):
            raise errors.BadRequest(f"Invalid trait name {name!r}")
    if not names:
        return
    known = set(session.execute(sa.select(Trait.name).where(Trait.name.in_(names))).scalars())
    for name in sorted(names - known):
        try:
            with session.begin_nested():
                session.execute(sa.insert(Trait).values(name=name))
        except sa.exc.IntegrityError:
            pass  # created by a concurrent writer: exactly what we wanted


def list_traits(session: orm.Session) -> list[str]:
    return list(session.execute(sa.select(Trait.name).order_by(Trait.name)).scalars())


def set_traits(session: orm.Session, rp_uuid: str, generation: int,
               traits) -> tuple[int, list[str]]:
    """Replace a provider's traits (creating unknown ones); returns (generation, traits)."""
    row = get_provider(session, rp_uuid)
    _check_generation(row, generation)
    traits = sorted(set(traits))
    ensure_traits(session, traits)
    new_generation = bump_generation(session, rp_uuid, row.generation)
    session.execute(sa.delete(ProviderTrait).where(
        ProviderTrait.resource_provider_uuid == rp_uuid))
    if traits:
        session.execute(sa.insert(ProviderTrait), [
            {"resource_provider_uuid": rp_uuid, "trait": t} for t in traits])
    session.expire(row)
    return new_generation, traits
