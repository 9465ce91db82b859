"""Allocation candidates across provider trees and sharing providers, by request group.

For each tree, each class of the unsuffixed group may come from any provider of
the tree, or from a provider that shares its inventory (trait
``MISC_SHARES_VIA_AGGREGATE``) with that tree through an aggregate, as in
Placement; its required traits are looked for on the providers it uses, its
forbidden ones must be on none of them. A suffixed group is met by one provider
of the tree (or a sharing one) that has all its resources and traits. Groups
are then combined: ``group_policy=isolate`` keeps suffixed groups on distinct
providers, ``same_subtree`` needs one of the named groups' providers above all
the others, ``root_required`` looks at the tree's root. Before microversion
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

    def member(self, rp: str, aggregates: list[set[str]], refused: set[str],
               with_root: bool = True) -> bool:
        """Whether ``rp`` (with its root's aggregates, ``with_root``) meets ``member_of``."""
        have = set(self.aggregates.get(rp, set()))
        if with_root:
            have |= self.aggregates.get(self.rows[rp].root_provider_uuid, set())
        return all(group & have for group in aggregates) and not refused & have


def find_groups(session: orm.Session, request: dict, nested_aware: bool = True) -> dict:
    """``{"allocation_requests": [{"allocations": ..., "mappings": ...}],
    "provider_summaries": {...}}`` of every combination of the request's groups that fits.

    ``request``: ``groups`` by suffix (``""`` the unsuffixed one; each with resources,
    required, forbidden, aggregates, refused_aggregates, in_tree), ``group_policy``,
    ``root_required``, ``root_forbidden``, ``same_subtrees``.
    """
    world = _World(session)
    shared = {rp for rp in world.rows if SHARING_TRAIT in world.traits.get(rp, ())}
    lenders: dict[str, list[str]] = defaultdict(list)
    for rp in sorted(shared, key=lambda u: world.rows[u].name):
        for anchor in world.sharing_anchors(rp):
            lenders[anchor].append(rp)
    groups = request["groups"]
    suffixes = list(groups)
    seen: set = set()
    found: list[dict] = []
    for anchor in world.trees:
        root_traits = world.traits.get(anchor, set())
        if not all(g & root_traits for g in request.get("root_required", ())) \
                or request.get("root_forbidden", set()) & root_traits:
            continue
        options = []
        for suffix, group in groups.items():
            choices = _group_options(world, anchor, suffix, group, lenders, shared)
            if not choices:
                break
            options.append(choices)
        else:
            for combo in itertools.islice(itertools.product(*options), MAX_COMBINATIONS):
                made = _combine(world, request, suffixes, combo, nested_aware)
                if made is None:
                    continue
                if len(suffixes) > 1 or shared.intersection(made["allocations"]):
                    # Only then can another tree yield the same request again.
                    key = (frozenset((rp, rc, n) for rp, res in made["allocations"].items()
                                     for rc, n in res.items()),
                           frozenset((s, tuple(p)) for s, p in made["mappings"].items()))
                    if key in seen:
                        continue
                    seen.add(key)
                found.append(made)
    first = next((rc for g in groups.values() for rc in g["resources"]), None)
    found.sort(key=lambda m: (len(m["allocations"]),
                              -_free(world, next(iter(m["allocations"]), ""), first)))
    return {"allocation_requests": [
                {"allocations": {rp: {"resources": res}
                                 for rp, res in m["allocations"].items()},
                 "mappings": m["mappings"]} for m in found],
            "provider_summaries": summaries(world, [m["allocations"] for m in found],
                                            nested_aware)}


def _group_options(world: _World, anchor: str, suffix: str, group: dict, lenders,
                   shared: set[str]) -> list[tuple[dict, tuple[str, ...]]]:
    """Ways one group can be met in ``anchor``'s tree: (allocation, providers used)."""
    tree = world.trees[anchor]
    pool = tree + [rp for rp in lenders.get(anchor, ()) if rp not in tree]
    if group["in_tree"] is not None:
        # Only providers of that tree: it keeps other trees' sharing providers out.
        row = world.rows.get(group["in_tree"])
        pool = [rp for rp in pool
                if row is not None and world.rows[rp].root_provider_uuid == row.root_provider_uuid]
    aggregates, refused = group["aggregates"], group["refused_aggregates"]
    if aggregates or refused:
        # The unsuffixed group sees its tree's root aggregates; a suffixed one its own.
        pool = [rp for rp in pool if world.member(rp, aggregates, refused, with_root=not suffix)]
    resources = group["resources"]
    if suffix:
        return [({rp: dict(resources)} if resources else {}, (rp,)) for rp in pool
                if all(world.fits(rp, rc, n) for rc, n in resources.items())
                and _traits_ok(world, {rp}, group["required"], group["forbidden"])]
    per_class = [[rp for rp in pool if world.fits(rp, rc, n)] for rc, n in resources.items()]
    out = []
    for choice in itertools.islice(itertools.product(*per_class), MAX_COMBINATIONS):
        allocation: dict[str, dict[str, int]] = {}
        for rc, rp in zip(resources, choice, strict=True):
            allocation.setdefault(rp, {})[rc] = resources[rc]
        if _traits_ok(world, set(allocation), group["required"], group["forbidden"]):
            out.append((allocation, tuple(sorted(allocation))))
    return out


def _combine(world: _World, request: dict, suffixes: list[str], combo,
             nested_aware: bool) -> dict | None:
    """The groups' allocations merged, or None when the combination breaks a rule."""
    isolate = request.get("group_policy") == "isolate"
    merged: dict[str, dict[str, int]] = {}
    mappings: dict[str, list[str]] = {}
    taken: set[str] = set()
    for suffix, (allocation, used) in zip(suffixes, combo, strict=True):
        if suffix and isolate:  # resourceless groups too, as in Placement
            if taken & set(used):
                return None
            taken |= set(used)
        for rp, res in allocation.items():
            for rc, n in res.items():
                merged.setdefault(rp, {})[rc] = merged.get(rp, {}).get(rc, 0) + n
        mappings[suffix] = list(used)
    if len(suffixes) > 1:  # a single group's amounts were checked already
        for rp, res in merged.items():
            for rc, n in res.items():
                if not world.fits(rp, rc, n):
                    return None
    roots = [world.rows[rp].root_provider_uuid for rp in merged]
    if not nested_aware and len(set(roots)) < len(roots):
        return None  # before 1.29 one tree lends one provider only
    for listed in request.get("same_subtrees", ()):
        chosen = {p for s in listed for p in mappings.get(s, ())}
        if not any(all(_is_ancestor(world, top, p) for p in chosen) for top in chosen):
            return None
    return {"allocations": merged, "mappings": mappings}


def _is_ancestor(world: _World, top: str, rp: str) -> bool:
    while rp is not None:
        if rp == top:
            return True
        rp = world.rows[rp].parent_provider_uuid
    return False


def _traits_ok(world: _World, used: set[str], required, forbidden) -> bool:
    if not required and not forbidden:
        return True
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
            # Standard traits first, as Placement lists them (by id).
            "traits": sorted(world.traits.get(rp, ()),
                             key=lambda t: (t.startswith("CUSTOM_"), t)),
            "parent_provider_uuid": row.parent_provider_uuid,
            "root_provider_uuid": row.root_provider_uuid,
        }
    return out
