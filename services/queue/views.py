"""Where a queued request stands: its reservation's ``queue`` field, the admin's list.

``position`` counts from 1 in priority-then-age order; an admission pass may
still admit a later request first (backfill, fair share: docs/queue.md).
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common.exceptions import InvalidInput
from fleetflow.persistence import queue as queue_rows


def _view(entry, ahead: int) -> dict:
    return {"position": ahead + 1, "ahead": ahead, "waiting_since": entry.created_at,
            "last_attempt": entry.last_attempt, "why": entry.why}


def entry_view(session, kind: str, ref_id: str) -> dict | None:
    """The ``queue`` field of a waiting request (None once it left the queue)."""
    entry = queue_rows.find(session, kind, ref_id)
    if entry is None or entry.admitted_at is not None:
        return None
    return _view(entry, queue_rows.ahead_of(session, entry))


def waiting_page(database, limit: int, marker: str | None = None) -> tuple[list[dict], bool]:
    """``(page, more)``: waiting requests in queue order, after the one ``marker`` names."""
    with database.read_session() as session:
        offset = 0
        if marker:
            entry = session.execute(sa.select(queue_rows.QueueEntry).where(
                queue_rows.QueueEntry.ref_id == marker,
                queue_rows.QueueEntry.admitted_at.is_(None))).scalar_one_or_none()
            if entry is None:
                raise InvalidInput(f"marker: no waiting request {marker}", field="marker")
            offset = queue_rows.ahead_of(session, entry) + 1
        entries = queue_rows.page(session, limit + 1, offset)
        more = len(entries) > limit
        return [{"kind": e.kind, "id": e.ref_id, "tenant_id": e.tenant_id,
                 "priority": e.priority, "deadline": e.deadline, "bypassed": e.bypassed,
                 **_view(e, offset + i)} for i, e in enumerate(entries[:limit])], more
