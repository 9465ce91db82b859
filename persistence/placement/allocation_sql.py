"""The SQL of a write of allocations, built once.

Constructing these statements per call cost more CPU than running them on
SQLite; lists go in as expanding parameters.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from fleetflow.persistence.placement.models import (
    Allocation,
    Consumer,
    Inventory,
    ResourceProvider,
)

A = Allocation.__table__
C = Consumer.__table__
RP = ResourceProvider.__table__
INV = Inventory.__table__

CONSUMERS_AND_HELD = (
    sa.select(C.c.uuid, C.c.generation, C.c.project_id, C.c.user_id,
              A.c.resource_provider_uuid)
    .select_from(C.outerjoin(A, A.c.consumer_uuid == C.c.uuid))
    .where(C.c.uuid.in_(sa.bindparam("uuids", expanding=True))))
# Row locks in uuid order (PostgreSQL: FOR NO KEY UPDATE; see allocations._apply).
LOCK_PROVIDERS = (
    sa.select(RP.c.uuid, RP.c.generation)
    .where(RP.c.uuid.in_(sa.bindparam("uuids", expanding=True)))
    .order_by(RP.c.uuid).with_for_update(key_share=True))
# A claim's new consumers, created unless they exist; RETURNING names the created
# ones (SQLite 3.35+ and PostgreSQL both have ON CONFLICT DO NOTHING ... RETURNING).
CREATE_IF_ABSENT = {
    dialect.__name__.rsplit(".", 1)[-1]:
        dialect.insert(C).on_conflict_do_nothing(index_elements=[C.c.uuid]).returning(C.c.uuid)
    for dialect in (postgresql, sqlite)}
DROP_ALLOCATIONS = A.delete().where(
    A.c.consumer_uuid.in_(sa.bindparam("uuids", expanding=True)))
# Every touched provider's generation, compare-and-swapped in one statement.
# The uuids alone too: SQLite searches a row-value list only by scanning every provider.
SEEN_GENERATIONS = sa.and_(RP.c.uuid.in_(sa.bindparam("seen_uuids", expanding=True)),
                           sa.tuple_(RP.c.uuid, RP.c.generation).in_(
                               sa.bindparam("seen", expanding=True)))
# A provider that only loses allocations keeps its generation, as in Placement, but
# its row moves (updated_at, by the column's onupdate) so that cached snapshots of its
# usage are read again; compare-and-swapped like a bump.
TOUCH_PROVIDERS = RP.update().where(SEEN_GENERATIONS)
_MINE, _INV, _ALL = A.alias("mine"), INV.alias("inv"), A.alias("everyone")
IN_USE = (sa.select(sa.func.sum(_ALL.c.used))
           .where(_ALL.c.resource_provider_uuid == _INV.c.resource_provider_uuid,
                  _ALL.c.resource_class == _INV.c.resource_class).scalar_subquery())
# A row just written for these consumers on the provider that breaks its inventory:
# none there, min_unit/max_unit/step_size, or the fresh sum above the capacity
# (sum > (total - reserved) * ratio is providers.capacity's int() for integer sums).
VIOLATION = (
    sa.exists().select_from(_MINE.outerjoin(_INV, sa.and_(
        _INV.c.resource_provider_uuid == _MINE.c.resource_provider_uuid,
        _INV.c.resource_class == _MINE.c.resource_class)))
    .where(_MINE.c.resource_provider_uuid == RP.c.uuid,
           # NOTE: "|| ''" keeps SQLite from driving this by the consumer index,
           # which looks up every listed consumer for every provider: quadratic in a
           # claim of many (10,000 consumers on 2,000 hosts: 8.5 s against 0.6 s).
           _MINE.c.consumer_uuid.concat("").in_(sa.bindparam("consumers", expanding=True)),
           sa.or_(_INV.c.resource_provider_uuid.is_(None),
                  _MINE.c.used < _INV.c.min_unit, _MINE.c.used > _INV.c.max_unit,
                  _MINE.c.used % _INV.c.step_size != 0,
                  IN_USE > (_INV.c.total - _INV.c.reserved) * _INV.c.allocation_ratio)))
# The bump of a write that adds allocations also checks them: on success no
# separate capacity read is needed; a short rowcount is a lost race or a refusal.
BUMP_PROVIDERS_IF_THEY_FIT = (RP.update().where(SEEN_GENERATIONS, ~VIOLATION)
                               .values(generation=RP.c.generation + 1))
USED = (sa.select(A.c.resource_provider_uuid.label("rp"), A.c.resource_class.label("rc"),
                   sa.func.sum(A.c.used).label("used"))
         .where(A.c.resource_provider_uuid.in_(sa.bindparam("uuids", expanding=True)))
         .group_by(A.c.resource_provider_uuid, A.c.resource_class).subquery())
# Inventories and fresh usage sums of the providers, in one statement.
INVENTORIES_AND_USE = (
    sa.select(INV, sa.func.coalesce(USED.c.used, 0).label("in_use"))
    .select_from(INV.outerjoin(USED, sa.and_(
        USED.c.rp == INV.c.resource_provider_uuid,
        USED.c.rc == INV.c.resource_class)))
    .where(INV.c.resource_provider_uuid.in_(sa.bindparam("uuids", expanding=True))))
