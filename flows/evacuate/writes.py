"""The writes every move ends with, stored together with other moves' (group commit).

A thousand servers off a rack end their moves within seconds of each other;
each one's "move row DONE, instance switched" and "migration consumer
dropped" alone would be two thousand rounds of the database's write lock,
fought over by the engine's own checkpoints. Through
:class:`persistence.group_commit.GroupCommit` the writes that arrive while
one batch is being written go in the next batch's single transaction, and
each caller returns only once its own write is committed.
"""

from __future__ import annotations

import threading
import weakref

import sqlalchemy as sa

from fleetflow.persistence.group_commit import GroupCommit
from fleetflow.persistence.models import Instance, Move, utcnow
from fleetflow.persistence.placement import allocations

_lock = threading.Lock()
_row_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_release_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _writer(registry, database, make) -> GroupCommit:
    writer = registry.get(database)
    if writer is None:
        with _lock:
            writer = registry.get(database)
            if writer is None:
                writer = registry[database] = make()
    return writer


def _apply_rows(connection, items) -> None:
    moves, instances = Move.__table__, Instance.__table__
    by_columns: dict[tuple, list] = {}
    for evacuation_id, uuid, move_values, instance_values in items:
        key = (frozenset(move_values), frozenset(instance_values or ()))
        by_columns.setdefault(key, []).append((evacuation_id, uuid, move_values,
                                              instance_values))
    now = utcnow()
    for (move_columns, instance_columns), batch in by_columns.items():
        connection.execute(
            moves.update().where(moves.c.evacuation_id == sa.bindparam("b_evacuation"),
                                 moves.c.instance_id == sa.bindparam("b_uuid"))
            .values(updated_at=now, **{c: sa.bindparam(f"v_{c}", type_=moves.c[c].type)
                                       for c in move_columns}),
            [{"b_evacuation": e, "b_uuid": u, **{f"v_{c}": v for c, v in mv.items()}}
             for e, u, mv, _iv in batch])
        if instance_columns:
            connection.execute(
                instances.update().where(instances.c.id == sa.bindparam("b_uuid"))
                .values(updated_at=now, **{c: sa.bindparam(f"v_{c}") for c in instance_columns}),
                [{"b_uuid": u, **{f"v_{c}": v for c, v in iv.items()}}
                 for _e, u, _mv, iv in batch])


def write_move(database, evacuation_id: str, uuid: str, move_values: dict,
               instance_values: dict | None = None) -> None:
    """Update one move row (and its instance row) as one committed write, batched."""
    writer = _writer(_row_writers, database,
                     lambda: GroupCommit(database.transaction, _apply_rows))
    writer.write((evacuation_id, uuid, dict(move_values), dict(instance_values or {})))


def _apply_releases(session, items) -> None:
    """Drop every named migration consumer's allocations (their moves are done)."""
    by_fence: dict[str | None, list] = {}
    for migration_id, fence in items:
        key = None if not fence else f"{fence['key']}={fence['token']}"
        by_fence.setdefault(key, [fence, []])[1].append(migration_id)
    for fence, migration_ids in by_fence.values():
        allocations.empty_consumers(session, migration_ids, fence)


def release_migration(placement, migration_id: str, fence: dict | None = None) -> None:
    """The move is done: drop the source allocations its migration consumer held.

    The local placement store takes many releases in one transaction; any
    other Placement gets its own safe delete per consumer.
    """
    store = getattr(placement, "store", None)
    if store is None:
        placement.confirm_move(migration_id, fence=fence)
        return
    writer = _writer(_release_writers, store.database,
                     lambda: GroupCommit(store.database.session, _apply_releases))
    writer.write((migration_id, fence))
