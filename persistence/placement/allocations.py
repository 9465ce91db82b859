"""Writing and reading consumers' allocations (functions over a session).

One call to :func:`replace_allocations` replaces the allocations of one or
more consumers in the caller's transaction, all or nothing:

1. the fence (if any) is checked;
2. every named provider must exist (else BadRequest, 400);
3. each consumer's generation is checked: ``None`` means "I am the first
   writer" and fails when the consumer already has allocations; an integer
   must equal the stored generation; :data:`ANY_GENERATION` (DELETE and
   pre-1.28 requests) skips the check;
4. consumer rows are bumped with compare-and-swap (or inserted), which also
   serialises writers of one consumer;
5. the old allocations are replaced by the new ones;
6. every provider that gains or loses allocations has its generation bumped
   with compare-and-swap, in uuid order (no deadlocks between writers);
7. only then are capacity, min_unit, max_unit and step_size checked against
   fresh sums: after step 6 we hold each provider's row lock, so under READ
   COMMITTED no other writer can have changed its allocations unseen.

A lost provider race raises :class:`LostRace`; the store retries the whole
transaction. Anything else is the caller's error and is raised as is.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.persistence import fences
from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.models import (
    MAX_INT,
    Allocation,
    Consumer,
    Inventory,
    ResourceProvider,
)
from fleetflow.persistence.placement.providers import NAME_PATTERN, canonical_uuid, capacity

ANY_GENERATION = object()  # skip the consumer generation check
DEFAULT_CONSUMER_TYPE = "unknown"


class LostRace(Exception):
    """Another writer changed a row between our read and our write: retry."""

    def __init__(self, error: errors.ConcurrentUpdate):
        super().__init__(str(error))
        self.error = error


@dataclasses.dataclass
class ConsumerWrite:
    """The complete new allocations of one consumer, ``{rp_uuid: {rc: used}}``."""

    consumer_uuid: str
    allocations: dict[str, dict[str, int]]
    project_id: str
    user_id: str
    generation: object = None
    consumer_type: str | None = None


def _validate(writes: list[ConsumerWrite]) -> list[ConsumerWrite]:
    seen = set()
    for w in writes:
        w.consumer_uuid = canonical_uuid(w.consumer_uuid, "consumer uuid")
        if w.consumer_uuid in seen:
            raise errors.BadRequest(f"consumer {w.consumer_uuid} appears twice")
        seen.add(w.consumer_uuid)
        if not w.project_id or not w.user_id:
            raise errors.BadRequest("project_id and user_id are required")
        g = w.generation
        if g is not ANY_GENERATION and g is not None and (
                isinstance(g, bool) or not isinstance(g, int)):
            raise errors.BadRequest(f"consumer_generation must be an integer or null, got {g!r}")
        clean = {}
        for rp, resources in (w.allocations or {}).items():
            rp = canonical_uuid(rp, "resource provider uuid")
            if not resources:
                raise errors.BadRequest(f"allocation on {rp} names no resources")
            for rc, used in resources.items():
                if not NAME_PATTERN.match(rc or ""):
                    raise errors.BadRequest(f"Invalid resource class name {rc!r}")
                if isinstance(used, bool) or not isinstance(used, int) \
                        or not 1 <= used <= MAX_INT:
                    raise errors.BadRequest(f"{rc} on {rp}: used must be an integer "
                                            f">= 1, got {used!r}")
            clean[rp] = dict(resources)
        w.allocations = clean
    return writes


def replace_allocations(session: orm.Session, writes: list[ConsumerWrite],
                        fence: dict | None = None) -> None:
    """Replace the allocations of every consumer in ``writes`` (see module doc)."""
    writes = _validate(list(writes))
    fences.check(session, fence)
    by_uuid = {w.consumer_uuid: w for w in writes}
    uuids = sorted(by_uuid)
    new_rps = {rp for w in writes for rp in w.allocations}

    known = set(session.execute(sa.select(ResourceProvider.uuid).where(
        ResourceProvider.uuid.in_(new_rps))).scalars()) if new_rps else set()
    if new_rps - known:
        raise errors.BadRequest("Allocation for resource provider "
                                f"'{sorted(new_rps - known)[0]}' that does not exist.")

    consumers = {row.uuid: row for row in session.execute(
        sa.select(Consumer.uuid, Consumer.generation).where(Consumer.uuid.in_(uuids)))}
    held: dict[str, set[str]] = defaultdict(set)
    for consumer_uuid, rp in session.execute(
            sa.select(Allocation.consumer_uuid, Allocation.resource_provider_uuid)
            .where(Allocation.consumer_uuid.in_(uuids))):
        held[consumer_uuid].add(rp)
    _check_consumer_generations(writes, consumers, held)
    _write_consumers(session, writes, consumers)

    # Read provider generations only after the consumer rows are ours, so the
    # set of providers this write takes allocations from cannot change under us.
    old_rps = {rp for rps in held.values() for rp in rps}
    touched = sorted(new_rps | old_rps)
    generations = dict(session.execute(
        sa.select(ResourceProvider.uuid, ResourceProvider.generation)
        .where(ResourceProvider.uuid.in_(touched))).all()) if touched else {}

    session.execute(sa.delete(Allocation.__table__).where(
        Allocation.consumer_uuid.in_(uuids)))
    rows = [{"consumer_uuid": w.consumer_uuid, "resource_provider_uuid": rp,
             "resource_class": rc, "used": used}
            for w in writes for rp, resources in w.allocations.items()
            for rc, used in resources.items()]
    if rows:
        session.execute(sa.insert(Allocation.__table__), rows)

    for rp in touched:
        result = session.execute(
            sa.update(ResourceProvider.__table__)
            .where(ResourceProvider.uuid == rp,
                   ResourceProvider.generation == generations[rp])
            .values(generation=generations[rp] + 1))
        if result.rowcount != 1:
            raise LostRace(errors.ProviderGenerationConflict(
                f"resource provider {rp} changed while allocating"))
    _check_capacity(session, writes, sorted(new_rps))


def _check_consumer_generations(writes, consumers, held) -> None:
    for w in writes:
        row = consumers.get(w.consumer_uuid)
        if w.generation is ANY_GENERATION:
            continue
        if w.generation is None:
            if held.get(w.consumer_uuid):
                raise errors.ConsumerGenerationConflict(
                    f"consumer generation conflict - expected {row.generation} but got "
                    f"null: consumer {w.consumer_uuid} already has allocations")
        elif row is None or row.generation != w.generation:
            expected = "null" if row is None or not held.get(w.consumer_uuid) \
                else row.generation
            raise errors.ConsumerGenerationConflict(
                f"consumer generation conflict - expected {expected} but got "
                f"{w.generation}")


def _write_consumers(session, writes, consumers) -> None:
    table = Consumer.__table__
    new = []
    for w in sorted(writes, key=lambda w: w.consumer_uuid):
        row = consumers.get(w.consumer_uuid)
        values = {"project_id": w.project_id, "user_id": w.user_id}
        if w.consumer_type:
            values["consumer_type"] = w.consumer_type
        if row is None:
            if w.allocations:  # writing nothing for nobody creates nobody
                new.append(dict(values, uuid=w.consumer_uuid, generation=1,
                                consumer_type=w.consumer_type or DEFAULT_CONSUMER_TYPE))
            continue
        result = session.execute(
            table.update().where(table.c.uuid == w.consumer_uuid,
                                 table.c.generation == row.generation)
            .values(generation=row.generation + 1, **values))
        if result.rowcount != 1:
            conflict = errors.ConsumerGenerationConflict(
                f"consumer {w.consumer_uuid} was changed by another writer")
            if w.generation is ANY_GENERATION:
                raise LostRace(conflict)
            raise conflict
    if new:
        # One bulk insert: the provision flow claims thousands of new consumers at once.
        try:
            session.execute(table.insert(), new)
        except sa.exc.IntegrityError:
            # A concurrent first writer created the same consumer: the caller's
            # "I am first" (null generation) belief was wrong.
            raise errors.ConsumerGenerationConflict(
                "consumer generation conflict - a concurrent writer created "
                "the consumer first") from None


def _check_capacity(session, writes, rps) -> None:
    if not rps:
        return
    inventories = {(inv.resource_provider_uuid, inv.resource_class): inv
                   for inv in session.execute(sa.select(Inventory).where(
                       Inventory.resource_provider_uuid.in_(rps))).scalars()}
    needed = set()
    for w in writes:
        for rp, resources in w.allocations.items():
            for rc, used in resources.items():
                inv = inventories.get((rp, rc))
                if inv is None:
                    raise errors.CapacityExceeded(
                        f"Unable to allocate inventory: resource provider {rp} has no "
                        f"inventory of {rc}")
                if used < inv.min_unit or used > inv.max_unit or used % inv.step_size:
                    raise errors.ConstraintViolated(
                        f"Unable to allocate inventory: {used} {rc} on {rp} violates "
                        f"min_unit={inv.min_unit}, max_unit={inv.max_unit}, "
                        f"step_size={inv.step_size}")
                needed.add((rp, rc))
    totals = usages_by_provider(session, rps)
    for rp, rc in sorted(needed):
        inv = inventories[(rp, rc)]
        used = totals.get(rp, {}).get(rc, 0)
        if used > capacity(inv):
            raise errors.CapacityExceeded(
                f"Unable to allocate inventory: capacity of {rc} on resource provider {rp} "
                f"exceeded ({used} > {capacity(inv)})", provider=rp, resource_class=rc)


def usages_by_provider(session: orm.Session, rps=None) -> dict[str, dict[str, int]]:
    """``{rp_uuid: {rc: total used}}`` for the given providers (all when None)."""
    query = sa.select(Allocation.resource_provider_uuid, Allocation.resource_class,
                      sa.func.sum(Allocation.used)).group_by(
        Allocation.resource_provider_uuid, Allocation.resource_class)
    if rps is not None:
        query = query.where(Allocation.resource_provider_uuid.in_(list(rps)))
    totals: dict[str, dict[str, int]] = defaultdict(dict)
    for rp, rc, used in session.execute(query):
        totals[rp][rc] = int(used)
    return totals


def get_allocations(session: orm.Session, consumer_uuid: str) -> dict:
    """A consumer's allocations in Placement's shape (1.38, the API trims it)."""
    rows = session.execute(
        sa.select(Allocation.resource_provider_uuid, Allocation.resource_class,
                  Allocation.used, ResourceProvider.generation)
        .join(ResourceProvider,
              ResourceProvider.uuid == Allocation.resource_provider_uuid)
        .where(Allocation.consumer_uuid == consumer_uuid)).all()
    if not rows:
        # An unknown (or emptied) consumer: no generation, so writers send null.
        return {"allocations": {}}
    result: dict = {}
    for rp, rc, used, generation in rows:
        entry = result.setdefault(rp, {"resources": {}, "generation": generation})
        entry["resources"][rc] = used
    consumer = session.get(Consumer, consumer_uuid)
    return {"allocations": result, "consumer_generation": consumer.generation,
            "project_id": consumer.project_id, "user_id": consumer.user_id,
            "consumer_type": consumer.consumer_type}


def provider_allocations(session: orm.Session, rp_uuid: str) -> dict:
    """``{consumer_uuid: {"resources": {...}, "consumer_generation": g}}`` on one provider."""
    rows = session.execute(
        sa.select(Allocation.consumer_uuid, Allocation.resource_class, Allocation.used,
                  Consumer.generation)
        .join(Consumer, Consumer.uuid == Allocation.consumer_uuid)
        .where(Allocation.resource_provider_uuid == rp_uuid)).all()
    result: dict = {}
    for consumer_uuid, rc, used, generation in rows:
        entry = result.setdefault(consumer_uuid, {"resources": {},
                                                  "consumer_generation": generation})
        entry["resources"][rc] = used
    return result


def project_usages(session: orm.Session, project_id: str, user_id: str | None = None,
                   consumer_type: str | None = None) -> dict:
    """``{consumer_type: {"consumer_count": n, rc: used}}`` for a project (and user)."""
    query = (sa.select(Consumer.consumer_type, Allocation.resource_class,
                       sa.func.sum(Allocation.used),
                       sa.func.count(sa.distinct(Allocation.consumer_uuid)))
             .join(Consumer, Consumer.uuid == Allocation.consumer_uuid)
             .where(Consumer.project_id == project_id)
             .group_by(Consumer.consumer_type, Allocation.resource_class))
    if user_id is not None:
        query = query.where(Consumer.user_id == user_id)
    if consumer_type is not None:
        query = query.where(Consumer.consumer_type == consumer_type)
    grouped: dict[str, dict] = defaultdict(dict)
    for ctype, rc, used, _count in session.execute(query):
        grouped[ctype][rc] = int(used)
    counts = (sa.select(Consumer.consumer_type, sa.func.count(sa.distinct(Consumer.uuid)))
              .join(Allocation, Consumer.uuid == Allocation.consumer_uuid)
              .where(Consumer.project_id == project_id)
              .group_by(Consumer.consumer_type))
    if user_id is not None:
        counts = counts.where(Consumer.user_id == user_id)
    for ctype, count in session.execute(counts):
        if ctype in grouped:
            grouped[ctype]["consumer_count"] = int(count)
    return dict(grouped)
