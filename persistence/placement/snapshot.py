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
# How many different requests' fitting providers a snapshot keeps.
_FITTING_KEPT = 32


class Provider(typing.NamedTuple):
    uuid: str
    name: str
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


def _has_room(entry: tuple[int, int, int, int], amount: int) -> bool:
    """Whether a (free, min_unit, max_unit, step_size) entry can take ``amount``."""
    free, low, high, step = entry
    return free >= amount and low <= amount <= high and not amount % step


def _items(kept: dict) -> tuple:
    """``kept``'s items, copied at once: a request on the base snapshot may add to it
    meanwhile (iterating the dict itself could then fail)."""
    return tuple(kept.items())


def _patched(base: dict, dropped, fresh: dict) -> dict:
    """``base`` without the ``dropped`` providers' entries, with ``fresh`` ones instead."""
    out = dict(base)
    for rp in dropped:
        out.pop(rp, None)
    out.update(fresh)
    return out


class Snapshot:
    """Read-only view of placement at one set of stamps (shared between requests).

    Made from ``base`` (the previous snapshot), only the ``dropped`` providers'
    (changed or gone) entries are replaced by ``details`` (their fresh rows).
    """

    def __init__(self, stamps: list[tuple], details: tuple[dict, dict, dict, dict],
                 base: Snapshot | None = None, dropped: set[str] | None = None):
        self.stamps = stamps
        # What the trees are made of: unchanged by claims, inventories or traits.
        self.shape = [(s[0], s[1], s[3], s[4]) for s in stamps]  # in name order
        if base is not None and base.shape == self.shape:
            self.rows, self.trees, self.root_of = base.rows, base.trees, base.root_of
            self.single_trees, self.tree_positions = base.single_trees, base.tree_positions
        else:
            self._make_trees()
        if base is None:
            (self.inventories, self.usages, self.traits, self.aggregates) = details
            # Built on first use; a provider's summary depends on its own rows only.
            self.summaries: dict[str, dict] = {}
            self.summary_texts: dict[str, str] = {}
            # Per resource class: {provider: (free, min_unit, max_unit, step_size)}.
            self._free: dict[str, dict[str, tuple]] = {}
            self._minus_free: dict[str | None, dict[str, int]] = {}
            self._fitting: dict[tuple, tuple[set[str], list[set[str]]]] = {}
            return
        self.inventories, self.usages, self.traits, self.aggregates = (
            _patched(mine, dropped, theirs) for mine, theirs in zip(
                (base.inventories, base.usages, base.traits, base.aggregates), details,
                strict=True))
        self.summaries = _patched(base.summaries, dropped, {})
        self.summary_texts = _patched(base.summary_texts, dropped, {})
        self._free = {rc: _patched(entries, dropped, {
            rp: self._entry(rp, rc) for rp in dropped
            if rc in self.inventories.get(rp, {})}) for rc, entries in _items(base._free)}
        self._minus_free = {rc: _patched(keys, dropped, {
            rp: -self._free[rc][rp][0] for rp in dropped if rp in self._free[rc]})
            for rc, keys in _items(base._minus_free)}
        self._fitting = {key: self._patched_fitting(key, found, dropped)
                         for key, found in _items(base._fitting)}

    def _patched_fitting(self, key: tuple, found: tuple[set[str], list[set[str]]],
                         dropped: set[str]) -> tuple[set[str], list[set[str]]]:
        """A base snapshot's fitting providers of ``key``, the ``dropped`` ones looked at
        again."""
        per_class = []
        for (rc, amount), fits in zip(key, found[1], strict=True):
            entries = self._entries(rc)
            per_class.append(fits - dropped | {
                rp for rp in dropped if rp in entries
                and _has_room(entries[rp], amount)})
        return set.intersection(*per_class) if per_class else set(), per_class

    def _make_trees(self) -> None:
        self.rows = {s[0]: Provider(*s) for s in self.shape}
        # Trees in the order of their first provider by name; members by name.
        trees: dict[str, list[str]] = defaultdict(list)
        for uuid, row in self.rows.items():
            trees[row.root_provider_uuid].append(uuid)
        self.trees = dict(trees)
        self.root_of = {uuid: row.root_provider_uuid for uuid, row in self.rows.items()}
        # Roots of the one-provider trees (most of a fleet), in the trees' order.
        self.single_trees = [root for root, members in self.trees.items() if len(members) == 1]
        self.tree_positions = {root: i for i, root in enumerate(self.trees)}

    def _entry(self, rp: str, rc: str) -> tuple[int, int, int, int]:
        inv = self.inventories[rp][rc]
        return (inv.capacity - self.usages.get(rp, {}).get(rc, 0), inv.min_unit,
                inv.max_unit, inv.step_size)

    def _entries(self, rc: str) -> dict[str, tuple]:
        entries = self._free.get(rc)
        if entries is None:
            entries = self._free[rc] = {rp: self._entry(rp, rc)
                                        for rp, invs in self.inventories.items() if rc in invs}
        return entries

    def free(self, rc: str | None) -> dict[str, int]:
        """``{provider: capacity - used}`` of every provider with ``rc`` inventory."""
        return {rp: entry[0] for rp, entry in self._entries(rc).items()}

    def minus_free(self, rc: str | None) -> dict[str, int]:
        """``{provider: used - capacity}`` (a sort key: most room first), kept per class."""
        found = self._minus_free.get(rc)
        if found is None:
            found = self._minus_free[rc] = {rp: -entry[0]
                                            for rp, entry in self._entries(rc).items()}
        return found

    def fitting(self, resources: dict[str, int]) -> tuple[set[str], list[set[str]]]:
        """(providers with room, each alone, for every class of ``resources``; per class
        in ``resources``' order, the providers with room for that class).

        Kept for the last few ``resources`` asked (shared: callers must not change
        the sets); a write makes a new snapshot, which patches them for the changed
        providers.
        """
        key = tuple(resources.items())
        found = self._fitting.get(key)
        if found is None:
            if len(self._fitting) >= _FITTING_KEPT:
                self._fitting.clear()
            found = self._fitting[key] = self._fitting_now(resources)
        return found

    def _fitting_now(self, resources: dict[str, int]) -> tuple[set[str], list[set[str]]]:
        everywhere: set[str] | None = None
        per_class = []
        for rc, amount in resources.items():
            fits = {rp for rp, (free, low, high, step) in self._entries(rc).items()
                    if free >= amount and low <= amount <= high and not amount % step}
            per_class.append(fits)
            everywhere = fits if everywhere is None else everywhere & fits
        return everywhere or set(), per_class

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


# (inventories, usages summed, traits, aggregates) of every provider; built once, so
# that SQLAlchemy compiles each once (a refresh after a write runs them for a few).
_DETAILS = (
    sa.select(INV.c.resource_provider_uuid, INV.c.resource_class, INV.c.total,
              INV.c.reserved, INV.c.min_unit, INV.c.max_unit, INV.c.step_size,
              INV.c.allocation_ratio)
    # The primary key's order: a provider's classes always in one order.
    .order_by(INV.c.resource_provider_uuid, INV.c.resource_class),
    sa.select(A.c.resource_provider_uuid, A.c.resource_class, sa.func.sum(A.c.used))
    .group_by(A.c.resource_provider_uuid, A.c.resource_class),
    sa.select(PT.c.resource_provider_uuid, PT.c.trait),
    sa.select(PA.c.resource_provider_uuid, PA.c.aggregate_uuid),
)
# The same, of the providers in the expanding parameter ``uuids``.
_DETAILS_OF = tuple(
    query.where(column.in_(sa.bindparam("uuids", expanding=True)))
    for query, column in zip(_DETAILS, (INV.c.resource_provider_uuid,
                                        A.c.resource_provider_uuid,
                                        PT.c.resource_provider_uuid,
                                        PA.c.resource_provider_uuid), strict=True))


def _read_details(conn, uuids: list[str] | None) -> tuple[dict, dict, dict, dict]:
    """(inventories, usages, traits, aggregates) of ``uuids`` (every provider when None)."""
    inventories: dict[str, dict[str, Inv]] = defaultdict(dict)
    usages: dict[str, dict[str, int]] = defaultdict(dict)
    traits: dict[str, set[str]] = defaultdict(set)
    aggregates: dict[str, set[str]] = defaultdict(set)
    chunks = [None] if uuids is None else [uuids[i:i + _IN_CHUNK]
                                           for i in range(0, len(uuids), _IN_CHUNK)]
    for chunk in chunks:
        queries, params = (_DETAILS, {}) if chunk is None else (_DETAILS_OF, {"uuids": chunk})
        for row in conn.execute(queries[0], params):
            inventories[row.resource_provider_uuid][row.resource_class] = _inv(row)
        for rp, rc, used in conn.execute(queries[1], params):
            usages[rp][rc] = int(used)
        for rp, trait in conn.execute(queries[2], params):
            traits[rp].add(trait)
        for rp, aggregate in conn.execute(queries[3], params):
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
                dropped = set(changed) | before.keys() - {s[0] for s in stamps}
                return Snapshot(stamps, _read_details(conn, changed), old, dropped)
        return Snapshot(stamps, _read_details(conn, None))


def touch(session: orm.Session, uuids) -> None:
    """Move the stamps of ``uuids`` for a change that bumps no generation."""
    uuids = sorted(set(uuids))
    if uuids:
        session.execute(RP.update().where(RP.c.uuid.in_(uuids)).values(updated_at=_utcnow()))
