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

from fleetflow.persistence.placement.snapshot import Snapshot

SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
# More combinations than any real request needs; the rest would only cost time.
MAX_COMBINATIONS = 10000
_NOTHING: frozenset[str] = frozenset()
_SEARCH = object()  # a tree the direct path leaves to the general search


def _fits(world: Snapshot, rp: str, rc: str, amount: int) -> bool:
    inv = world.inventories.get(rp, {}).get(rc)
    if inv is None or amount < inv.min_unit or amount > inv.max_unit \
            or amount % inv.step_size:
        return False
    return world.usages.get(rp, {}).get(rc, 0) + amount <= inv.capacity


def _sharing_anchors(world: Snapshot, rp: str) -> set[str]:
    """Roots of the trees a sharing provider lends to (its own included)."""
    mine = world.aggregates.get(rp, _NOTHING)
    anchors = {world.rows[rp].root_provider_uuid}
    if mine:
        anchors |= {world.rows[other].root_provider_uuid
                    for other, aggs in world.aggregates.items() if aggs & mine}
    return anchors


def _member(world: Snapshot, rp: str, aggregates: list[set[str]], refused: set[str],
            with_root: bool = True) -> bool:
    """Whether ``rp`` (with its root's aggregates, ``with_root``) meets ``member_of``."""
    have = world.aggregates.get(rp, _NOTHING)
    if with_root:
        have = have | world.aggregates.get(world.rows[rp].root_provider_uuid, _NOTHING)
    return all(group & have for group in aggregates) and not refused & have


def find_groups(world: Snapshot, request: dict, nested_aware: bool = True) -> dict:
    """``{"allocation_requests": [{"allocations": ..., "mappings": ...}],
    "provider_summaries": {...}}`` of every combination of the request's groups that fits.

    ``request``: ``groups`` by suffix (``""`` the unsuffixed one; each with resources,
    required, forbidden, aggregates, refused_aggregates, in_tree), ``group_policy``,
    ``root_required``, ``root_forbidden``, ``same_subtrees``.
    """
    shared = {rp for rp, names in world.traits.items() if SHARING_TRAIT in names}
    lenders: dict[str, list[str]] = defaultdict(list)
    for rp in sorted(shared, key=lambda u: world.rows[u].name):
        for anchor in _sharing_anchors(world, rp):
            lenders[anchor].append(rp)
    groups = request["groups"]
    suffixes = list(groups)
    seen: set = set()
    root_required = request.get("root_required", ())
    root_forbidden = request.get("root_forbidden", set())
    alone = _single_group(request)
    fitting, fitting_per_class = world.fitting(alone["resources"]) if alone else (
        frozenset(), [])
    # Every direct-path request allocates the same amounts: one (read-only) entry.
    entry = {"resources": dict(alone["resources"])} if alone else {}
    # Nothing but room to check on a one-provider tree.
    room_only = alone and not (alone["required"] or alone["forbidden"] or alone["aggregates"]
                               or alone["refused_aggregates"])
    first = next((rc for g in groups.values() for rc in g["resources"]), None)
    minus_free = world.minus_free(first)
    found: list[dict] = []
    positions: list[int] = []  # of each request's tree, for ties in the order below
    firsts: list[str] = []  # each request's first provider, for the order below
    trees = world.trees
    if alone and not lenders and not (root_required or root_forbidden):
        # The usual request, without sharing providers: one-provider trees need
        # no search, only a look at the providers with room.
        direct = [rp for rp in world.single_trees if rp in fitting]
        if not room_only:
            direct = _alone_filtered(world, direct, alone)
        found = [{"allocations": {rp: entry}, "mappings": {suffixes[0]: [rp]}}
                 for rp in direct]
        positions = [world.tree_positions[rp] for rp in direct]
        firsts = list(direct)
        trees = {root: tree for root, tree in trees.items() if len(tree) > 1}
    for anchor, tree in trees.items():
        if root_required or root_forbidden:
            root_traits = world.traits.get(anchor, _NOTHING)
            if not all(g & root_traits for g in root_required) or root_forbidden & root_traits:
                continue
        if alone and anchor not in lenders:
            # A tree without sharing providers: what the general search below
            # would find, without building its options one by one.
            if len(tree) == 1:
                used = anchor if anchor in fitting and (
                    room_only or _alone_fits(world, anchor, alone)) else None
            else:
                used = _direct_provider(world, tree, alone, fitting_per_class)
            if used is not _SEARCH:
                if used is not None:
                    found.append({"allocations": {used: entry},
                                  "mappings": {suffixes[0]: [used]}})
                    positions.append(world.tree_positions[anchor])
                    firsts.append(used)
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
                allocations = made["allocations"]
                made["allocations"] = {rp: {"resources": res} for rp, res in allocations.items()}
                found.append(made)
                positions.append(world.tree_positions[anchor])
                firsts.append(next(iter(allocations), ""))
    # Fewest providers first, then most room in the first class, then the trees' order
    # (as one integer: the room's key, times the number of trees, plus the position).
    count = len(world.trees)
    sort_keys = [minus_free.get(rp, 0) * count + position
                 for rp, position in zip(firsts, positions, strict=True)]
    order = sorted(range(len(found)), key=sort_keys.__getitem__)
    sizes = [len(m["allocations"]) for m in found]
    if any(size != 1 for size in sizes):
        order.sort(key=sizes.__getitem__)
    found = [found[i] for i in order]
    return {"allocation_requests": found,
            "provider_summaries": summaries(world, [m["allocations"] for m in found],
                                            nested_aware)}


def _direct_provider(world: Snapshot, tree: list[str], group: dict,
                     fitting_per_class: list[set[str]]):
    """The one provider of ``tree`` (of several providers) that the single ``group`` can
    use, None when it can use none, or ``_SEARCH`` when the general search must decide
    (several ways, or aggregates to filter the tree's providers by).

    ``fitting_per_class``: for each class of the group, the providers with room for it.
    """
    if group["aggregates"] or group["refused_aggregates"]:
        return _SEARCH
    only = None
    for fits in fitting_per_class:
        here = [rp for rp in tree if rp in fits]
        if not here:
            return None
        if len(here) > 1 or (only is not None and here[0] != only):
            return _SEARCH
        only = here[0]
    return only if _traits_ok(world, (only,), group["required"], group["forbidden"]) \
        else None


def _single_group(request: dict) -> dict | None:
    """The request's one group, when it has resources and no tree or subtree rule."""
    groups = request["groups"]
    if len(groups) != 1 or request.get("same_subtrees"):
        return None
    group = next(iter(groups.values()))
    return group if group["resources"] and group["in_tree"] is None else None


def _alone_fits(world: Snapshot, rp: str, group: dict) -> bool:
    """Traits and aggregates of a one-provider tree for a group it has room for."""
    if (group["aggregates"] or group["refused_aggregates"]) and not _member(
            world, rp, group["aggregates"], group["refused_aggregates"]):
        return False
    return _traits_ok(world, (rp,), group["required"], group["forbidden"])


def _alone_filtered(world: Snapshot, rps: list[str], group: dict) -> list[str]:
    """The one-provider trees of ``rps`` (with room) that meet ``group``'s traits and
    aggregates: :func:`_alone_fits` of each, in one pass when only traits count."""
    if group["aggregates"] or group["refused_aggregates"]:
        return [rp for rp in rps if _alone_fits(world, rp, group)]
    traits, required = world.traits, group["required"]
    forbidden = frozenset(group["forbidden"])
    return [rp for rp in rps
            if forbidden.isdisjoint(have := traits.get(rp, _NOTHING))
            and all(wanted & have for wanted in required)]


def _group_options(world: Snapshot, anchor: str, suffix: str, group: dict, lenders,
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
        pool = [rp for rp in pool if _member(world, rp, aggregates, refused, with_root=not suffix)]
    resources = group["resources"]
    if suffix:
        return [({rp: dict(resources)} if resources else {}, (rp,)) for rp in pool
                if all(_fits(world, rp, rc, n) for rc, n in resources.items())
                and _traits_ok(world, {rp}, group["required"], group["forbidden"])]
    per_class = [[rp for rp in pool if _fits(world, rp, rc, n)] for rc, n in resources.items()]
    out = []
    for choice in itertools.islice(itertools.product(*per_class), MAX_COMBINATIONS):
        allocation: dict[str, dict[str, int]] = {}
        for rc, rp in zip(resources, choice, strict=True):
            allocation.setdefault(rp, {})[rc] = resources[rc]
        if _traits_ok(world, set(allocation), group["required"], group["forbidden"]):
            out.append((allocation, tuple(sorted(allocation))))
    return out


def _combine(world: Snapshot, request: dict, suffixes: list[str], combo,
             nested_aware: bool) -> dict | None:
    """The groups' allocations merged, or None when the combination breaks a rule."""
    if len(suffixes) == 1 and nested_aware and not request.get("same_subtrees"):
        # One group: its option is already a fitting, fresh allocation of its own.
        allocation, used = combo[0]
        return {"allocations": allocation, "mappings": {suffixes[0]: list(used)}}
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
                if not _fits(world, rp, rc, n):
                    return None
    roots = [world.rows[rp].root_provider_uuid for rp in merged]
    if not nested_aware and len(set(roots)) < len(roots):
        return None  # before 1.29 one tree lends one provider only
    for listed in request.get("same_subtrees", ()):
        chosen = {p for s in listed for p in mappings.get(s, ())}
        if not any(all(_is_ancestor(world, top, p) for p in chosen) for top in chosen):
            return None
    return {"allocations": merged, "mappings": mappings}


def _is_ancestor(world: Snapshot, top: str, rp: str) -> bool:
    while rp is not None:
        if rp == top:
            return True
        rp = world.rows[rp].parent_provider_uuid
    return False


def _traits_ok(world: Snapshot, used: set[str], required, forbidden) -> bool:
    if not required and not forbidden:
        return True
    have = set().union(*(world.traits.get(rp, _NOTHING) for rp in used))
    return all(group & have for group in required) and not set(forbidden) & have


def summaries(world: Snapshot, requests, nested_aware: bool) -> dict:
    """Every provider of every tree a request touches (1.29+); before, those it uses.

    The summaries are the snapshot's own (shared): callers copy what they change.
    """
    if nested_aware:
        root_of = world.root_of
        roots = {root_of[rp] for allocations in requests for rp in allocations}
        trees = world.trees
        shown = [rp for root in trees if root in roots for rp in trees[root]]
    else:
        shown = sorted({rp for allocations in requests for rp in allocations})
    kept = world.summaries
    return {rp: kept.get(rp) or world.summary(rp) for rp in shown}
