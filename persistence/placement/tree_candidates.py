"""Allocation candidates across provider trees and sharing providers (the unsuffixed
request group of ``GET /allocation_candidates``).

Each requested class may come from any provider of one tree, or from a provider
that shares its inventory (trait ``MISC_SHARES_VIA_AGGREGATE``) with that tree
through an aggregate, as in Placement. One allocation request is made for every
combination of such providers; required traits are looked for on the providers
of the combination, forbidden ones must be on none of them. Before microversion
1.29 (``nested_aware`` false) a combination takes one provider per tree and the
summaries show only the providers the requests use.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.persistence.placement.allocations import usages_by_provider
from fleetflow.persistence.placement.models import (
    Inventory,
    ProviderAggregate,
    ProviderTrait,
    ResourceProvider,
)
from fleetflow.persistence.placement.providers import capacity

SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
# More combinations than any real request needs; the rest would only cost time.
MAX_COMBINATIONS = 10000


class _World:
    """Every provider, inventory, usage, trait and aggregate, read once."""

    def __init__(self, session: orm.Session):
        self.rows = {row.uuid: row for row in session.execute(
            sa.select(ResourceProvider).order_by(ResourceProvider.name)).scalars()}
        self.inventories: dict[str, dict] = defaultdict(dict)
        for inv in session.execute(sa.select(Inventory)).scalars():
            self.inventories[inv.resource_provider_uuid][inv.resource_class] = inv
        self.traits: dict[str, set[str]] = defaultdict(set)
        for rp, trait in session.execute(sa.select(ProviderTrait.resource_provider_uuid,
                                                   ProviderTrait.trait)):
            self.traits[rp].add(trait)
        self.aggregates: dict[str, set[str]] = defaultdict(set)
        for rp, agg in session.execute(sa.select(ProviderAggregate.resource_provider_uuid,
                                                 ProviderAggregate.aggregate_uuid)):
            self.aggregates[rp].add(agg)
        self.usages = usages_by_provider(session)
        self.trees: dict[str, list[str]] = defaultdict(list)
        for uuid, row in self.rows.items():
            self.trees[row.root_provider_uuid].append(uuid)

    def fits(self, rp: str, rc: str, amount: int) -> bool:
        inv = self.inventories.get(rp, {}).get(rc)
        if inv is None or amount < inv.min_unit or amount > inv.max_unit \
                or amount % inv.step_size:
            return False
        return self.usages.get(rp, {}).get(rc, 0) + amount <= capacity(inv)

    def sharing_anchors(self, rp: str) -> set[str]:
        """Roots of the trees a sharing provider lends to (its own included)."""
        mine = self.aggregates.get(rp, set())
        anchors = {self.rows[rp].root_provider_uuid}
        if mine:
            anchors |= {self.rows[other].root_provider_uuid
                        for other, aggs in self.aggregates.items() if aggs & mine}
        return anchors

    def member(self, rp: str, aggregates: list[set[str]], refused: set[str]) -> bool:
        """``member_of`` of the unsuffixed group: the provider's or its root's aggregates."""
        have = self.aggregates.get(rp, set()) | self.aggregates.get(
            self.rows[rp].root_provider_uuid, set())
        return all(group & have for group in aggregates) and not refused & have


def find(session: orm.Session, resources: dict[str, int], required=(), forbidden=(),
         aggregates=(), refused_aggregates=frozenset(), in_tree: str | None = None,
         nested_aware: bool = True) -> dict:
    """``{"allocation_requests": [{"allocations": {rp: {"resources": ...}}}],
    "provider_summaries": {rp: {...}}}`` of every combination that fits."""
    world = _World(session)
    sharing = [rp for rp in world.rows if SHARING_TRAIT in world.traits.get(rp, ())]
    lenders: dict[str, list[str]] = defaultdict(list)
    for rp in sharing:
        for anchor in world.sharing_anchors(rp):
            lenders[anchor].append(rp)
    anchors = list(world.trees)
    if in_tree is not None:
        row = world.rows.get(in_tree)
        anchors = [row.root_provider_uuid] if row is not None else []
    seen: set[frozenset] = set()
    requests: list[dict[str, dict[str, int]]] = []
    shared = set(sharing)
    filtered = bool(aggregates or refused_aggregates)
    for anchor in anchors:
        # in_tree keeps sharing providers of other trees out, as in Placement.
        lent = () if in_tree is not None else lenders.get(anchor, ())
        pool = world.trees[anchor] + [rp for rp in lent if rp not in world.trees[anchor]] \
            if lent else world.trees[anchor]
        options = []
        for rc, amount in resources.items():
            fit = [rp for rp in pool if world.fits(rp, rc, amount)
                   and (not filtered or world.member(rp, list(aggregates),
                                                     set(refused_aggregates)))]
            if not fit:
                break
            options.append(fit)
        else:
            for choice in itertools.islice(itertools.product(*options), MAX_COMBINATIONS):
                allocation: dict[str, dict[str, int]] = {}
                for rc, rp in zip(resources, choice, strict=True):
                    allocation.setdefault(rp, {})[rc] = resources[rc]
                if (required or forbidden or len(allocation) > 1) and not _acceptable(
                        world, allocation, required, forbidden, nested_aware):
                    continue
                if len(allocation) > 1 or shared.intersection(allocation):
                    key = frozenset((rp, rc) for rp, res in allocation.items() for rc in res)
                    if key in seen:
                        continue
                    seen.add(key)
                requests.append(allocation)
    first = next(iter(resources), None)
    requests.sort(key=lambda a: (len(a), -_free(world, next(iter(a)), first)))
    return {"allocation_requests": [{"allocations": {rp: {"resources": res}
                                                     for rp, res in a.items()}}
                                    for a in requests],
            "provider_summaries": summaries(world, requests, nested_aware)}


def _acceptable(world: _World, allocation, required, forbidden, nested_aware) -> bool:
    used = set(allocation)
    roots = [world.rows[rp].root_provider_uuid for rp in used]
    if not nested_aware and len(set(roots)) < len(roots):
        return False  # before 1.29 one tree lends one provider only
    have = set().union(*(world.traits.get(rp, set()) for rp in used))
    return all(group & have for group in required) and not set(forbidden) & have


def _free(world: _World, rp: str, rc: str | None) -> int:
    inv = world.inventories.get(rp, {}).get(rc)
    return capacity(inv) - world.usages.get(rp, {}).get(rc, 0) if inv is not None else 0


def summaries(world: _World, requests, nested_aware: bool) -> dict:
    """Every provider of every tree a request touches (1.29+); before, those it uses."""
    used = {rp for a in requests for rp in a}
    roots = {world.rows[rp].root_provider_uuid for rp in used}
    shown = [rp for root in roots for rp in world.trees[root]] if nested_aware \
        else sorted(used)
    out = {}
    for rp in shown:
        row = world.rows[rp]
        out[rp] = {
            "resources": {rc: {"capacity": capacity(inv),
                               "used": world.usages.get(rp, {}).get(rc, 0)}
                          for rc, inv in world.inventories.get(rp, {}).items()},
            "traits": sorted(world.traits.get(rp, ())),
            "parent_provider_uuid": row.parent_provider_uuid,
            "root_provider_uuid": row.root_provider_uuid,
        }
    return out
