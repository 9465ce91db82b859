"""What changed lately: operations and hosts whose state changed after a cursor.

The console's pages poll one feed instead of every list: ``changes(since)``
answers the reservations, virtual clusters, evacuations and hosts whose row
changed after ``since`` (their ``updated_at``), oldest first, and the cursor
to ask with next (the last change's time). The rows are the record, so there
is no event table to keep in step: a change is seen as the row's current
state, and several changes of one row between two polls are one event.

A cursor is an ISO 8601 time; the first poll gives none and gets the last
``limit`` changes. Changes are strictly after the cursor: two changes in the
same microsecond across a page's end would be split, which ``limit`` makes
rare and the next poll's full lists (the console reloads a page it opens)
make harmless.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from fleetflow.common.exceptions import InvalidInput
from fleetflow.persistence import evacuations as evacuation_rows
from fleetflow.persistence.models import Evacuation, Host, Reservation, VCluster, utcnow

#: kind -> (model, the column of its state).
KINDS = {"reservation": (Reservation, "status"), "vcluster": (VCluster, "status"),
         "evacuation": (Evacuation, "status"), "host": (Host, "state")}
MAX_LIMIT = 500


def parse_cursor(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"since: {value!r} is not an ISO 8601 time (the cursor of an "
                           "earlier answer)") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(dt.UTC).replace(tzinfo=None)
    return parsed


def _cursor(value: dt.datetime) -> str:
    return value.replace(tzinfo=dt.UTC).isoformat()


def _event(kind: str, row, state: str) -> dict:
    ident = row.name if kind == "host" else row.id
    event = {"kind": kind, "id": ident, "state": state, "at": _cursor(row.updated_at),
             "tenant_id": getattr(row, "tenant_id", None)}
    if kind == "evacuation":
        event["hosts"] = list(row.hosts or ())
    if kind == "host":
        event["evacuation_id"] = row.evacuation_id
    return event


def changes(database, service_down_time: float, since: str | None = None,
            tenant: str | None = None, limit: int = 100) -> dict:
    """``{"events": [...], "cursor"}``: the rows changed after ``since``, oldest first.

    With ``tenant``, only that project's operations (no hosts).
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be 1 to {MAX_LIMIT}")
    after = parse_cursor(since)
    now = utcnow()
    found = []
    with database.read_session() as session:
        for kind, (model, column) in KINDS.items():
            if tenant is not None and kind in ("host", "evacuation"):
                continue
            query = sa.select(model)
            if after is not None:
                query = query.where(model.updated_at > after)
            if tenant is not None:
                query = query.where(model.tenant_id == tenant)
            # From a cursor the oldest ``limit`` of each kind (the page goes on from it),
            # else the newest: the merged page keeps as many of them overall.
            order = model.updated_at.asc() if after is not None else model.updated_at.desc()
            query = query.order_by(order).limit(limit)
            for row in session.scalars(query):
                state = (evacuation_rows.effective_host_state(row, service_down_time, now)
                         if kind == "host" else getattr(row, column))
                found.append((row.updated_at, _event(kind, row, state)))
    found.sort(key=lambda pair: pair[0])
    if after is not None:
        # Oldest first from the cursor, so the next poll goes on from the last one.
        page = found[:limit]
    else:
        page = found[-limit:]
    cursor = _cursor(page[-1][0]) if page else (since or _cursor(now))
    return {"events": [event for _at, event in page], "cursor": cursor}
