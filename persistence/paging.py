"""Pages of every list: of what tenants and operators made, newest first; of
the catalogues (hosts, flavors, images), by a unique key such as the name.

Every list of operations and of what they own (reservations, servers, volumes,
groups, clusters, evacuations, flows) reads newest first: by ``created_at``,
then by id among rows made in the same instant, so the order is total and a
page never repeats or skips a row. The marker is the id of the last row of the
previous page; the next page starts after that row's place in the order.

A marker must name a row the caller may list (its scope: the list before its
filters, so that a row whose status changed between two pages still works as
a marker); any other is a 400 naming ``marker``, as OpenStack's APIs answer,
rather than a page that silently starts somewhere.
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
            raise InvalidInput(f"Invalid query parameter field 'marker': no item {marker} "
                               "to list after.", field="marker")
        stmt = stmt.where(sa.or_(model.created_at < anchor.created_at, sa.and_(
            model.created_at == anchor.created_at, model.id < anchor.id)))
    # One row more than asked tells whether a next page exists.
    rows = list(session.scalars(stmt.order_by(model.created_at.desc(), model.id.desc())
                                .limit(limit + 1)))
    return rows[:limit], len(rows) > limit


def check_marker(session, scope: sa.Select, key, marker: str, what: str) -> None:
    """InvalidInput (``marker``) unless ``scope`` holds a row whose ``key`` is ``marker``."""
    found = session.scalar(scope.with_only_columns(key).where(key == marker).limit(1))
    if found is None:
        raise InvalidInput(f"Invalid query parameter field 'marker': no {what} {marker} "
                           "to list after.", field="marker")


def keyset_page(session, stmt: sa.Select, key, limit: int, marker: str | None,
                what: str, scope: sa.Select | None = None) -> tuple[list, bool]:
    """``(rows, more)``: the ``limit`` rows of ``stmt`` after ``marker`` by ``key``.

    ``scope`` is where the marker may be found (``stmt`` when not given).
    """
    if marker is not None:
        check_marker(session, stmt if scope is None else scope, key, marker, what)
        stmt = stmt.where(key > marker)
    # One row more than asked tells whether a next page exists.
    rows = list(session.scalars(stmt.order_by(key).limit(limit + 1)))
    return rows[:limit], len(rows) > limit
