"""Allocation candidates: providers that can take a request right now.

Only single-provider candidates are produced: each fleet host and storage
backend is a root provider holding all of its own inventory, so nested trees
and sharing providers (which Placement also combines) never matter here.
"""

from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.allocations import usages_by_provider
from fleetflow.persistence.placement.models import Inventory, ProviderTrait, ResourceProvider
from fleetflow.persistence.placement.providers import NAME_PATTERN, capacity


def parse_required(values) -> tuple[list[set[str]], set[str]]:
    """``required`` values -> (groups of which one trait each is needed, forbidden).

    ``HW_CPU_X86_AVX2,!CUSTOM_SLOW`` requires one and forbids the other;
    ``in:A,B`` (1.39) requires A or B. Several values are ANDed.
    """
    any_of: list[set[str]] = []
    forbidden: set[str] = set()
    for value in values or ():
        if value.startswith("in:"):
            group = {t.strip() for t in value[3:].split(",") if t.strip()}
            _check_names(group, value)
            any_of.append(group)
            continue
        for trait in filter(None, (t.strip() for t in value.split(","))):
            name = trait[1:] if trait.startswith("!") else trait
            _check_names({name}, value)
            if trait.startswith("!"):
                forbidden.add(name)
            else:
                any_of.append({name})
    return any_of, forbidden


def _check_names(names, value) -> None:
    if not names or not all(NAME_PATTERN.match(n) for n in names):
        raise errors.BadRequest(f"Invalid query string parameters: required={value!r}")


def matching_providers(session: orm.Session, resources: dict[str, int],
                       any_of=(), forbidden=(), limit: int | None = None):
    """Providers with room for ``resources`` and the wanted traits.

    Returns (ordered provider rows, inventories by provider, usages by
    provider, traits by provider). Ordered by most free capacity of the first
    requested class, then name, so callers spreading load get the emptiest first.
    """
    rows = list(session.execute(sa.select(ResourceProvider)
                                .order_by(ResourceProvider.name)).scalars())
    inventories: dict[str, dict] = defaultdict(dict)
    for inv in session.execute(sa.select(Inventory)).scalars():
        inventories[inv.resource_provider_uuid][inv.resource_class] = inv
    traits: dict[str, set[str]] = defaultdict(set)
    for rp, trait in session.execute(sa.select(ProviderTrait.resource_provider_uuid,
                                               ProviderTrait.trait)):
        traits[rp].add(trait)
    usages = usages_by_provider(session)

    def fits(row) -> bool:
        invs = inventories.get(row.uuid, {})
        for rc, amount in resources.items():
            inv = invs.get(rc)
            if inv is None or amount < inv.min_unit or amount > inv.max_unit \
                    or amount % inv.step_size:
                return False
            if usages.get(row.uuid, {}).get(rc, 0) + amount > capacity(inv):
                return False
        have = traits.get(row.uuid, set())
        return all(group & have for group in any_of) and not (set(forbidden) & have)

    chosen = [row for row in rows if fits(row)]
    if resources:
        first = next(iter(resources))
        chosen.sort(key=lambda r: -(capacity(inventories[r.uuid][first])
                                    - usages.get(r.uuid, {}).get(first, 0)))
    if limit is not None:
        chosen = chosen[:limit]
    return chosen, inventories, usages, traits


def allocation_candidates(session: orm.Session, resources: dict[str, int],
                          any_of=(), forbidden=(), limit: int | None = None) -> dict:
    """Placement's ``GET /allocation_candidates`` body (1.29+ shape)."""
    if not resources:
        raise errors.BadRequest("resources is required and must name at least one class")
    chosen, inventories, usages, traits = matching_providers(
        session, resources, any_of, forbidden, limit)
    requests = [{"allocations": {row.uuid: {"resources": dict(resources)}}} for row in chosen]
    summaries = {}
    for row in chosen:
        summaries[row.uuid] = {
            "resources": {rc: {"capacity": capacity(inv),
                               "used": usages.get(row.uuid, {}).get(rc, 0)}
                          for rc, inv in inventories[row.uuid].items()},
            "traits": sorted(traits.get(row.uuid, ())),
            "parent_provider_uuid": row.parent_provider_uuid,
            "root_provider_uuid": row.root_provider_uuid,
        }
    return {"allocation_requests": requests, "provider_summaries": summaries}
