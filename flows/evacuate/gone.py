"""Moves of servers a delete took: they never run, and what they held goes back.

Deletes and moves exclude each other (``persistence.evacuations.hold_for_delete``
on one side, the claims' conditional UPDATE on the other), but an evacuation
lists its servers when it is created: a server deleted after that has a
move that must not start. Such a move is SKIPPED (fault ``SERVER_DELETED``),
never FAILED: a deleted server is not a failure of the evacuation, and an
``on_error: pause`` must not stop every other move for it.

Rows written before that rule may also hold a deleted server's move whose
undone try gave the server its allocation and group memberships back after
its teardown had dropped them. :func:`release_leftovers` drops them; the
retry calls it before skipping, and an operator's ``skip`` and ``revert``
call it for the moves they end.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common import metrics, states
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import groups
from fleetflow.persistence import reservations as reservation_rows
from fleetflow.persistence.models import Instance, Move

SERVER_DELETED = "SERVER_DELETED"
GONE = (states.DELETING, states.DELETED)


def gone_status(session, uuid: str) -> str | None:
    """DELETING or DELETED when a delete took the server (DELETED for a row that is
    gone), else None."""
    status = session.scalar(sa.select(Instance.status).where(Instance.id == uuid))
    if status is None:
        return states.DELETED
    return status if status in GONE else None


def _migrations(move: Move) -> list[str]:
    # Every try has its own migration consumer; one left by any of them is a leftover.
    return [evac_rows.migration_id_for(move.evacuation_id, move.instance_id, attempt)
            for attempt in range((move.attempts or 0) + 1)]


def _give_back(placement, uuid: str, status: str, migrations: list[str], fence) -> None:
    if status == states.DELETED:
        placement.release_many([uuid, *migrations], fence=fence)
    else:
        for migration in migrations:
            placement.revert_move(uuid, migration, fence=fence)


def give_back_claim(placement, database, uuid: str, migration: str, fence=None) -> None:
    """Undo one claim made for a server a delete took meanwhile (see release_leftovers)."""
    with database.session() as session:
        status = gone_status(session, uuid) or states.DELETING
    _give_back(placement, uuid, status, [migration], fence)


def release_leftovers(placement, database, evacuation_id: str, uuid: str,
                      fence=None) -> str | None:
    """Give back what the moves of a deleted server still hold; its status, or None
    (nothing done) when the server is not deleted.

    DELETED: its teardown is over, so any allocation of the server or of its
    migration consumers, and any group membership, is a leftover: all go.
    DELETING: its teardown releases the server's own allocation and leaves
    its groups; only a migration consumer is handed back to the server first,
    so that the teardown's release frees it too. Idempotent.
    """
    with database.session() as session:
        status = gone_status(session, uuid)
        if status is None:
            return None
        migrations = _migrations(evac_rows.move(session, evacuation_id, uuid))
    _give_back(placement, uuid, status, migrations, fence)
    if status == states.DELETED:
        with database.session() as session:
            groups.leave(session, uuid)
    return status


def skip_if_gone(placement, database, evacuation_id: str, uuid: str, fence=None) -> bool:
    """SKIPPED (fault SERVER_DELETED, leftovers released) when a delete took the server."""
    status = release_leftovers(placement, database, evacuation_id, uuid, fence)
    if status is None:
        return False
    fault = reservation_rows.fault(SERVER_DELETED, f"server {uuid} is {status}: a delete "
                                   "took it before its move started", step="claim")
    with database.session() as session:
        evac_rows.update_move(session, evacuation_id, uuid, status=states.SKIPPED, step=None,
                              fault=fault)
    metrics.move_ended(states.SKIPPED)
    return True
