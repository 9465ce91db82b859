"""Pages of what tenants and operators made, newest first.

Every list of operations and of what they own (reservations, servers, volumes,
groups, clusters, evacuations, flows) reads newest first: by ``created_at``,
then by id among rows made in the same instant, so the order is total and a
page never repeats or skips a row. The marker is the id of the last row of the
previous page; the next page starts after that row's place in the order.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common.exceptions import InvalidInput


def newest_first(session, stmt: sa.Select, model, limit: int, marker: str | None = None,
                 scope: tuple = ()) -> tuple[list, bool]:
    """``(rows, more)``: up to ``limit`` rows of ``stmt`` after ``marker``, newest first.

    ``scope`` are the conditions that say whose rows these are (a tenant): a
    marker outside them is refused like an unknown one, so ids of others
    cannot be probed through paging.
    """
    if marker is not None:
        anchor = session.execute(sa.select(model.created_at, model.id)
                                 .where(model.id == marker, *scope)).first()
        if anchor is None:
            raise InvalidInput(f"marker: no item {marker} in this list", field="marker")
        stmt = stmt.where(sa.or_(model.created_at < anchor.created_at, sa.and_(
            model.created_at == anchor.created_at, model.id < anchor.id)))
    # One row more than asked tells whether a next page exists.
    rows = list(session.scalars(stmt.order_by(model.created_at.desc(), model.id.desc())
                                .limit(limit + 1)))
    return rows[:limit], len(rows) > limit
