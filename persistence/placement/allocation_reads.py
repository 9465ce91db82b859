"""Reading consumers' allocations (functions over a session).

One consumer's, many consumers', those on one provider, and a project's usage
per consumer type, each in the shape Placement answers with. The writes are
in :mod:`~fleetflow.persistence.placement.allocations`.
"""

from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.persistence.placement import allocation_sql as sql
from fleetflow.persistence.placement.models import Allocation, Consumer

A, C, RP = sql.A, sql.C, sql.RP


_CONSUMER_ROWS = (
    sa.select(A.c.consumer_uuid, A.c.resource_provider_uuid, A.c.resource_class, A.c.used,
              RP.c.generation, C.c.generation.label("consumer_generation"),
              C.c.project_id, C.c.user_id, C.c.consumer_type)
    .select_from(A.join(RP, RP.c.uuid == A.c.resource_provider_uuid)
                 .join(C, C.c.uuid == A.c.consumer_uuid)))

# Consumers per statement in get_many (SQLite's variable limit is far above).
_MANY_CHUNK = 500


def _bodies(rows) -> dict[str, dict]:
    bodies: dict[str, dict] = {}
    for row in rows:
        body = bodies.get(row.consumer_uuid)
        if body is None:
            body = bodies[row.consumer_uuid] = {
                "allocations": {}, "consumer_generation": row.consumer_generation,
                "project_id": row.project_id, "user_id": row.user_id,
                "consumer_type": row.consumer_type}
        entry = body["allocations"].setdefault(row.resource_provider_uuid,
                                               {"resources": {}, "generation": row.generation})
        entry["resources"][row.resource_class] = row.used
    return bodies


def get_allocations(session: orm.Session, consumer_uuid: str) -> dict:
    """A consumer's allocations in Placement's shape (1.38, the API trims it).

    An unknown (or emptied) consumer has no generation, so writers send null.
    """
    rows = session.connection().execute(
        _CONSUMER_ROWS.where(A.c.consumer_uuid == consumer_uuid)).all()
    return _bodies(rows).get(consumer_uuid) or {"allocations": {}}


def get_many(session: orm.Session, consumer_uuids) -> dict[str, dict]:
    """:func:`get_allocations` of many consumers, a few statements for all of them."""
    uuids = sorted(set(consumer_uuids))
    bodies: dict[str, dict] = {}
    for start in range(0, len(uuids), _MANY_CHUNK):
        chunk = uuids[start:start + _MANY_CHUNK]
        bodies.update(_bodies(session.connection().execute(
            _CONSUMER_ROWS.where(A.c.consumer_uuid.in_(chunk))).all()))
    return {u: bodies.get(u) or {"allocations": {}} for u in uuids}


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
