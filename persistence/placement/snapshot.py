"""Every provider, inventory, usage, trait and aggregate in memory, kept fresh per request.

``GET /allocation_candidates`` looks at the whole placement database, which
costs a query per table and thousands of rows per request. :class:`SnapshotCache`
keeps the last :class:`Snapshot` and checks it with one cheap query per request:
every provider's *stamp* (uuid, name, generation, parent, root, ``updated_at``).

The stamp of a provider moves on every write that can change what the search
sees about it, in this process or any other:

- inventories, traits, allocations (and so usages), re-shapes and aggregates
  from 1.19 bump the generation, in the writer's transaction;
- renames and re-parenting change the row itself (and ``updated_at``);
- aggregates before 1.19 and resource-class renames bump no generation, so they
  touch ``updated_at`` of the providers they change (:func:`touch`);
- creating or deleting a provider adds or removes a stamp.

So when every stamp is unchanged the snapshot is exact, and only the providers
whose stamps moved are read again. The stamps are read before the rows they
guard: under READ COMMITTED rows read later may be newer than their stamps,
which only makes the next request reload them once more, never keep stale ones.
"""

from __future__ import annotations

import json
import typing
from collections import defaultdict

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.persistence.placement.models import (
    Allocation,
    Inventory,
    ProviderAggregate,
    ProviderTrait,
    ResourceProvider,
    _utcnow,
)

RP = ResourceProvider.__table__
INV = Inventory.__table__
A = Allocation.__table__
PT = ProviderTrait.__table__
PA = ProviderAggregate.__table__

# Raw driver values: no per-row type conversion, compared only for equality.
_STAMPS = ("SELECT uuid, name, generation, parent_provider_uuid, root_provider_uuid, "
           "updated_at FROM resource_providers ORDER BY name")
# Past this share of changed providers one full read is cheaper than IN lists.
_FULL_RELOAD_SHARE = 4
# SQLite's and PostgreSQL's bound-parameter limits are far above this.
_IN_CHUNK = 500


class Provider(typing.NamedTuple):
    uuid: str
    name: str
    generation: int
    parent_provider_uuid: str | None
    root_provider_uuid: str


class Inv(typing.NamedTuple):
    total: int
    reserved: int
    min_unit: int
    max_unit: int
    step_size: int
    allocation_ratio: float
    capacity: int  # (total - reserved) * allocation_ratio, as Placement computes it


class Snapshot:
    """Read-only view of placement at one set of stamps (shared between requests)."""

    def __init__(self, stamps: list[tuple], inventories: dict, usages: dict, traits: dict,
                 aggregates: dict, summaries: dict | None = None,
                 summary_texts: dict | None = None):
        self.stamps = stamps
        self.rows = {s[0]: Provider(*s[:5]) for s in stamps}  # in name order
        self.inventories: dict[str, dict[str, Inv]] = inventories
        self.usages: dict[str, dict[str, int]] = usages
        self.traits: dict[str, frozenset[str]] = traits
        self.aggregates: dict[str, frozenset[str]] = aggregates
        # Trees in the order of their first provider by name; members by name.
        self.trees: dict[str, list[str]] = defaultdict(list)
        for uuid, row in self.rows.items():
            self.trees[row.root_provider_uuid].append(uuid)
        self.trees = dict(self.trees)
        # Built on first use; a provider's summary depends on its own rows only.
        self.summaries: dict[str, dict] = summaries or {}
        self.summary_texts: dict[str, str] = summary_texts or {}
        # Per resource class: (provider, free, min_unit, max_unit, step_size).
        self._free: dict[str, list[tuple]] = {}
        self._free_by_rp: dict[str | None, dict[str, int]] = {}

    def _entries(self, rc: str) -> list[tuple]:
        entries = self._free.get(rc)
        if entries is None:
            entries = self._free[rc] = [
                (rp, inv.capacity - self.usages.get(rp, {}).get(rc, 0), inv.min_unit,
                 inv.max_unit, inv.step_size)
                for rp, invs in self.inventories.items() if (inv := invs.get(rc)) is not None]
        return entries

    def free(self, rc: str | None) -> dict[str, int]:
        """``{provider: capacity - used}`` of every provider with ``rc`` inventory."""
        found = self._free_by_rp.get(rc)
        if found is None:
            found = self._free_by_rp[rc] = {e[0]: e[1] for e in self._entries(rc)}
        return found

    def fitting(self, resources: dict[str, int]) -> set[str]:
        """Providers with room, each alone, for every class of ``resources``."""
        found: set[str] | None = None
        for rc, amount in resources.items():
            fits = {rp for rp, free, low, high, step in self._entries(rc)
                    if free >= amount and low <= amount <= high and not amount % step}
            found = fits if found is None else found & fits
        return found or set()

    def summary(self, rp: str) -> dict:
        """Placement's provider summary of ``rp`` (1.29+ shape), built once per snapshot.

        Callers must not change it: it is shared by every request on this snapshot.
        """
        found = self.summaries.get(rp)
        if found is None:
            row = self.rows[rp]
            used = self.usages.get(rp, {})
            found = self.summaries[rp] = {
                "resources": {rc: {"capacity": inv.capacity, "used": used.get(rc, 0)}
                              for rc, inv in self.inventories.get(rp, {}).items()},
                # Standard traits first, as Placement lists them (by id).
                "traits": sorted(self.traits.get(rp, ()),
                                 key=lambda t: (t.startswith("CUSTOM_"), t)),
                "parent_provider_uuid": row.parent_provider_uuid,
                "root_provider_uuid": row.root_provider_uuid,
            }
        return found


    def summary_json(self, rp: str) -> str:
        """:meth:`summary` as JSON text, encoded once per snapshot."""
        text = self.summary_texts.get(rp)
        if text is None:
            text = self.summary_texts[rp] = json.dumps(self.summary(rp),
                                                       separators=(",", ":"))
        return text


def _inv(row) -> Inv:
    ratio = row.allocation_ratio
    return Inv(row.total, row.reserved, row.min_unit, row.max_unit, row.step_size, ratio,
               int((row.total - row.reserved) * ratio))


def _read_details(conn, uuids: list[str] | None) -> tuple[dict, dict, dict, dict]:
    """(inventories, usages, traits, aggregates) of ``uuids`` (every provider when None)."""
    inventories: dict[str, dict[str, Inv]] = defaultdict(dict)
    usages: dict[str, dict[str, int]] = defaultdict(dict)
    traits: dict[str, set[str]] = defaultdict(set)
    aggregates: dict[str, set[str]] = defaultdict(set)
    queries = [
        sa.select(INV.c.resource_provider_uuid, INV.c.resource_class, INV.c.total,
                  INV.c.reserved, INV.c.min_unit, INV.c.max_unit, INV.c.step_size,
                  INV.c.allocation_ratio),
        sa.select(A.c.resource_provider_uuid, A.c.resource_class, sa.func.sum(A.c.used))
        .group_by(A.c.resource_provider_uuid, A.c.resource_class),
        sa.select(PT.c.resource_provider_uuid, PT.c.trait),
        sa.select(PA.c.resource_provider_uuid, PA.c.aggregate_uuid),
    ]
    columns = [INV.c.resource_provider_uuid, A.c.resource_provider_uuid,
               PT.c.resource_provider_uuid, PA.c.resource_provider_uuid]
    chunks = [None] if uuids is None else [uuids[i:i + _IN_CHUNK]
                                           for i in range(0, len(uuids), _IN_CHUNK)]
    for chunk in chunks:
        where = [query if chunk is None else query.where(column.in_(chunk))
                 for query, column in zip(queries, columns, strict=True)]
        for row in conn.execute(where[0]):
            inventories[row.resource_provider_uuid][row.resource_class] = _inv(row)
        for rp, rc, used in conn.execute(where[1]):
            usages[rp][rc] = int(used)
        for rp, trait in conn.execute(where[2]):
            traits[rp].add(trait)
        for rp, aggregate in conn.execute(where[3]):
            aggregates[rp].add(aggregate)
    return (dict(inventories), dict(usages),
            {rp: frozenset(names) for rp, names in traits.items()},
            {rp: frozenset(names) for rp, names in aggregates.items()})


class SnapshotCache:
    """The newest :class:`Snapshot` of one database, checked on every :meth:`current`."""

    def __init__(self):
        self._snapshot: Snapshot | None = None

    def current(self, session: orm.Session) -> Snapshot:
        """The snapshot that matches the database as ``session`` sees it now."""
        conn = session.connection()
        # The driver's own cursor: a thousand plain tuples, no result wrapping.
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            cursor.execute(_STAMPS)
            stamps = [tuple(row) for row in cursor.fetchall()]
        finally:
            cursor.close()
        old = self._snapshot
        if old is not None and old.stamps == stamps:
            return old
        # Requests in other threads may refresh at the same time: each builds its
        # own snapshot from what it read, and the last one kept is as good as any.
        self._snapshot = fresh = self._refresh(conn, old, stamps)
        return fresh

    @staticmethod
    def _refresh(conn, old: Snapshot | None, stamps: list[tuple]) -> Snapshot:
        if old is not None:
            before = {s[0]: s for s in old.stamps}
            changed = [s[0] for s in stamps if before.get(s[0]) != s]
            if len(changed) * _FULL_RELOAD_SHARE <= len(stamps):
                same = {s[0] for s in stamps}.difference(changed)
                merged = []
                for mine, theirs in zip((old.inventories, old.usages, old.traits,
                                         old.aggregates), _read_details(conn, changed),
                                        strict=True):
                    kept = {rp: value for rp, value in mine.items() if rp in same}
                    kept.update(theirs)
                    merged.append(kept)
                return Snapshot(stamps, *merged, summaries={
                    rp: summary for rp, summary in old.summaries.items() if rp in same},
                    summary_texts={rp: text for rp, text in old.summary_texts.items()
                                   if rp in same})
        return Snapshot(stamps, *_read_details(conn, None))


def touch(session: orm.Session, uuids) -> None:
    """Move the stamps of ``uuids`` for a change that bumps no generation."""
    uuids = sorted(set(uuids))
    if uuids:
        session.execute(RP.update().where(RP.c.uuid.in_(uuids)).values(updated_at=_utcnow()))
