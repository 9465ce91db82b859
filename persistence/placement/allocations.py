"""Writing consumers' allocations, and each provider's usage (functions over a session).

One call to :func:`replace_allocations` replaces the allocations of one or
more consumers in the caller's transaction, all or nothing:

1. the fence (if any) is checked;
2. the consumers' rows and the providers they hold allocations on are read;
3. every provider that gains or loses allocations is read and row-locked in
   uuid order; each newly named one must exist (else ProviderGone, 400);
4. each consumer's generation is checked: ``None`` means "I am the first
   writer" and fails when the consumer already has allocations; an integer
   must equal the stored generation; :data:`ANY_GENERATION` (DELETE and
   pre-1.28 requests) skips the check;
5. consumer rows are bumped with compare-and-swap (or inserted), which also
   catches a consumer changed since step 2;
6. the old allocations are replaced by the new ones;
7. as in Placement, the generation of every provider the new allocations name
   (and, but for a DELETE, of those an emptied consumer held) is bumped with
   compare-and-swap (one a consumer only moves away from keeps its generation,
   and its row is touched instead), in
   one UPDATE that also checks capacity, min_unit, max_unit and step_size
   against fresh sums (it runs after the write, and no other writer can
   change these providers' allocations until we commit, so under READ
   COMMITTED the sums are the truth);
8. only when that UPDATE falls short are the inventories read again, to
   raise the exact refusal, or a lost race if nothing is refused.

A lost provider race raises :class:`LostRace`; the store retries the whole
transaction. Anything else is the caller's error and is raised as is.

Reading consumers' allocations back is
:mod:`~fleetflow.persistence.placement.allocation_reads`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.persistence import bulk, fences
from fleetflow.persistence.placement import allocation_sql as sql
from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.models import (
    MAX_INT,
    Allocation,
    _utcnow,
)
from fleetflow.persistence.placement.providers import NAME_PATTERN, canonical_uuid, capacity

# The tables, as the statements of allocation_sql name them.
A, C, INV = sql.A, sql.C, sql.INV

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
    # Core statements on the session's connection: a claim is ~5 statements and
    # the ORM layer would double their cost on this hot path.
    conn = session.connection()
    if writes and conn.dialect.name in sql.CREATE_IF_ABSENT and all(
            w.generation is None and w.allocations for w in writes):
        # First writers of consumers that are (almost always) new: nothing of
        # theirs to read first; creating them tells which ones existed.
        _apply(conn, writes, {}, {}, claim=True)
        return
    consumers, held = _read_consumers(conn, [w.consumer_uuid for w in writes])
    _apply(conn, writes, consumers, held)


def release_allocations(session: orm.Session, consumer_uuid: str,
                        fence: dict | None = None) -> None:
    """Drop every allocation of a consumer (DELETE, no generation check).

    ConsumerNotFound when it has none. The consumer is read once, for both the
    existence check and the write.
    """
    conn = session.connection()
    consumers, held = _read_consumers(conn, [consumer_uuid])
    if not held.get(consumer_uuid):
        raise errors.ConsumerNotFound(f"No allocations for consumer '{consumer_uuid}'")
    fences.check(session, fence)
    row = consumers[consumer_uuid]
    _apply(conn, [ConsumerWrite(consumer_uuid, {}, row.project_id, row.user_id,
                                ANY_GENERATION)], consumers, held, bump_emptied=False)


def empty_consumers(session: orm.Session, consumer_uuids, fence: dict | None = None) -> None:
    """Write no allocations for each of ``consumer_uuids`` that holds some, as a PUT of
    none at its generation would (its providers gain a generation); those holding none
    are left as they are. The consumers are read once, for the check and the write."""
    fences.check(session, fence)
    conn = session.connection()
    consumers, held = _read_consumers(conn, consumer_uuids)
    writes = [ConsumerWrite(uuid, {}, consumers[uuid].project_id, consumers[uuid].user_id,
                            consumers[uuid].generation)
              for uuid in sorted(held) if held[uuid]]
    if writes:
        _apply(conn, writes, consumers, held)


def _read_consumers(conn, consumer_uuids):
    """``({uuid: row}, {uuid: providers it holds allocations on})``."""
    consumers: dict = {}
    held: dict[str, set[str]] = defaultdict(set)
    for row in conn.execute(sql.CONSUMERS_AND_HELD, {"uuids": sorted(consumer_uuids)}):
        consumers[row.uuid] = row
        if row.resource_provider_uuid is not None:
            held[row.uuid].add(row.resource_provider_uuid)
    return consumers, held


def _apply(conn, writes, consumers, held, claim: bool = False,
           bump_emptied: bool = True) -> None:
    """Steps 3 to 8 of the module doc for validated ``writes``.

    ``claim``: every write has a null generation and the consumers were not
    read; they are created here after the provider locks, and only those that
    already existed are read (one with allocations is a generation conflict,
    so it needs none of its providers locked). ``bump_emptied``: whether the
    providers of a consumer written empty gain a generation (a PUT or POST of
    no allocations does, a DELETE does not, as in Placement).
    """
    new_rps = {rp for w in writes for rp in w.allocations}
    # Every provider that gains or loses allocations, read and row-locked in
    # uuid order (PostgreSQL: FOR NO KEY UPDATE, which still lets others insert
    # allocations that reference the row). The lock makes writers queue for a
    # hot provider instead of all reading one generation and all but one losing
    # the compare-and-swap below, which stays as the guard (and is all SQLite,
    # whose BEGIN IMMEDIATE already serialises writers, needs).
    touched = sorted(new_rps | {rp for rps in held.values() for rp in rps})
    generations = dict(conn.execute(sql.LOCK_PROVIDERS, {"uuids": touched}).all()) \
        if touched else {}
    if new_rps - set(generations):
        gone = sorted(new_rps - set(generations))[0]
        raise errors.ProviderGone(f"Allocation for resource provider '{gone}' that does "
                                  "not exist.", provider=gone)
    to_write = writes
    if claim:
        existed = _create_consumers(conn, writes)
        if existed:
            consumers, held = _read_consumers(conn, existed)
        to_write = [w for w in writes if w.consumer_uuid in existed]
    generation_of = {uuid: row.generation for uuid, row in consumers.items()}
    _check_consumer_generations(writes, generation_of, held)
    # A consumer changed since we read it fails its compare-and-swap here.
    _write_consumers(conn, to_write, generation_of)

    if held:
        conn.execute(sql.DROP_ALLOCATIONS, {"uuids": sorted(held)})
    rows = [{"consumer_uuid": w.consumer_uuid, "resource_provider_uuid": rp,
             "resource_class": rc, "used": used}
            for w in writes for rp, resources in w.allocations.items()
            for rc, used in resources.items()]
    if rows:
        conn.execute(A.insert(), rows)
    if not generations:
        return
    # Placement bumps the generation of the providers its allocation records name:
    # the new allocations', and an emptied consumer's old ones (records of 0). A
    # provider a consumer only moves away from keeps its generation, as do those of
    # a DELETE; their rows are touched instead.
    bumped = set(new_rps)
    if bump_emptied:
        bumped.update(rp for w in writes if not w.allocations
                      for rp in held.get(w.consumer_uuid, ()))
    seen = sorted(generations.items())
    gaining = [(uuid, g) for uuid, g in seen if uuid in bumped]
    losing = [(uuid, g) for uuid, g in seen if uuid not in bumped]
    moved = 0
    if gaining:
        moved += conn.execute(sql.BUMP_PROVIDERS_IF_THEY_FIT, {
            "seen": gaining, "seen_uuids": [uuid for uuid, _ in gaining],
            "consumers": sorted(w.consumer_uuid for w in writes)}).rowcount
    if losing:
        moved += conn.execute(sql.TOUCH_PROVIDERS.values(updated_at=_utcnow()), {
            "seen": losing, "seen_uuids": [uuid for uuid, _ in losing]}).rowcount
    if moved != len(seen):
        # Refused allocations raise their exact error here; else a generation moved.
        _check_capacity(conn, writes, sorted(new_rps))
        raise LostRace(errors.ProviderGenerationConflict(
            "a resource provider changed while allocating: "
            + ", ".join(uuid for uuid, _ in seen)))


def _create_consumers(conn, writes) -> list[str]:
    """Insert the consumers of ``writes`` that do not exist; returns those that did."""
    rows = [{"uuid": w.consumer_uuid, "generation": 1, "project_id": w.project_id,
             "user_id": w.user_id, "consumer_type": w.consumer_type or DEFAULT_CONSUMER_TYPE}
            for w in sorted(writes, key=lambda w: w.consumer_uuid)]
    created = set(conn.execute(sql.CREATE_IF_ABSENT[conn.dialect.name], rows).scalars())
    return [row["uuid"] for row in rows if row["uuid"] not in created]


def _check_consumer_generations(writes, consumers, held) -> None:
    for w in writes:
        row = consumers.get(w.consumer_uuid)
        if w.generation is ANY_GENERATION:
            continue
        if w.generation is None:
            if held.get(w.consumer_uuid):
                raise errors.ConsumerGenerationConflict(
                    f"consumer generation conflict - expected {row} but got "
                    f"null: consumer {w.consumer_uuid} already has allocations")
        elif row is None or row != w.generation:
            expected = "null" if row is None or not held.get(w.consumer_uuid) else row
            raise errors.ConsumerGenerationConflict(
                f"consumer generation conflict - expected {expected} but got "
                f"{w.generation}")


def _write_consumers(conn, writes, consumers) -> None:
    """Create the new consumers; bump each known one's generation, a compare-and-set
    on the generation read (ConsumerGenerationConflict, or LostRace for a write of
    any generation, when another writer moved it)."""
    new, known = [], []
    for w in sorted(writes, key=lambda w: w.consumer_uuid):
        row = consumers.get(w.consumer_uuid)
        if row is None:
            if w.allocations:  # writing nothing for nobody creates nobody
                new.append({"uuid": w.consumer_uuid, "generation": 1,
                            "project_id": w.project_id, "user_id": w.user_id,
                            "consumer_type": w.consumer_type or DEFAULT_CONSUMER_TYPE})
            continue
        known.append(w)
    # One statement for all of them (a release of a hundred is a hundred consumers),
    # or a few: a write without a consumer type keeps the stored one, and a lost
    # compare-and-set raises by the kind of generation the writes hold.
    for typed in (True, False):
        for any_generation in (True, False):
            bumps = [w for w in known if bool(w.consumer_type) is typed
                     and (w.generation is ANY_GENERATION) is any_generation]
            rows = [{"uuid": w.consumer_uuid, bulk.EXPECTED: consumers[w.consumer_uuid],
                     "generation": consumers[w.consumer_uuid] + 1,
                     "project_id": w.project_id, "user_id": w.user_id,
                     **({"consumer_type": w.consumer_type} if typed else {})}
                    for w in bumps]
            if bulk.update_each(conn, C, rows, key="uuid", expect="generation",
                                updated_at=_utcnow()) != len(rows):
                _raise_moved(bumps)
    if new:
        # One bulk insert: the provision flow claims thousands of new consumers at once.
        try:
            conn.execute(C.insert(), new)
        except sa.exc.IntegrityError:
            # A concurrent first writer created the same consumer: the caller's
            # "I am first" (null generation) belief was wrong.
            raise errors.ConsumerGenerationConflict(
                "consumer generation conflict - a concurrent writer created "
                "the consumer first") from None


def _raise_moved(writes) -> None:
    """The conflict of ``writes`` (all of one kind of generation) when another writer
    moved one of their consumers since it was read. Which one the count does not
    say, and a read afterwards cannot tell: the other writer bumped it to the same
    generation."""
    if len(writes) == 1:
        message = f"consumer {writes[0].consumer_uuid} was changed by another writer"
    else:
        message = ("one of consumers " + ", ".join(w.consumer_uuid for w in writes)
                   + " was changed by another writer")
    conflict = errors.ConsumerGenerationConflict(message)
    if writes[0].generation is ANY_GENERATION:
        raise LostRace(conflict)
    raise conflict


def _check_capacity(conn, writes, rps) -> None:
    if not rps:
        return
    inventories, totals = {}, {}
    for row in conn.execute(sql.INVENTORIES_AND_USE, {"uuids": rps}):
        key = (row.resource_provider_uuid, row.resource_class)
        inventories[key], totals[key] = row, int(row.in_use)
    needed = set()
    for w in writes:
        for rp, resources in w.allocations.items():
            for rc, amount in resources.items():
                inv = inventories.get((rp, rc))
                if inv is None:
                    if not _class_exists(conn, rc):
                        raise errors.BadRequest(
                            f"Unable to allocate inventory for consumer {w.consumer_uuid}: "
                            f"No such resource class {rc}.")
                    raise errors.CapacityExceeded(
                        f"Unable to allocate inventory: Inventory for '{rc}' on resource "
                        f"provider '{rp}' invalid.")
                if amount < inv.min_unit or amount > inv.max_unit or amount % inv.step_size:
                    raise errors.ConstraintViolated(
                        f"Unable to allocate inventory: Unable to create allocation for "
                        f"'{rc}' on resource provider '{rp}'. The requested amount would "
                        f"violate inventory constraints (min_unit={inv.min_unit}, "
                        f"max_unit={inv.max_unit}, step_size={inv.step_size}).")
                needed.add((rp, rc))
    for rp, rc in sorted(needed):
        limit = capacity(inventories[(rp, rc)])
        if totals[(rp, rc)] > limit:
            raise errors.CapacityExceeded(
                f"Unable to allocate inventory: Unable to create allocation for '{rc}' on "
                f"resource provider '{rp}'. The requested amount would exceed the capacity "
                f"({totals[(rp, rc)]} > {limit}).", provider=rp, resource_class=rc)


def _class_exists(conn, rc: str) -> bool:
    """Whether Placement knows ``rc`` (only asked on the failure path of a write)."""
    from fleetflow.persistence.placement import catalog
    from fleetflow.persistence.placement.models import ResourceClass

    if rc in catalog.STANDARD_CLASSES:
        return True
    # A class some inventory has is known too (a fleet file may name its own).
    return any(conn.execute(query).first() is not None for query in (
        sa.select(ResourceClass.name).where(ResourceClass.name == rc),
        sa.select(INV.c.resource_class).where(INV.c.resource_class == rc).limit(1)))


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
