"""One page of a list, as every list of the API pages: keyset pagination.

Rows come sorted by a unique key; ``marker`` is the key of the last row already
seen, and the page holds the next ``limit`` rows. A marker must name a row the
caller may list (``scope``: the list before its filters, so that a row whose
status changed between two pages still works as a marker); any other is a 400
naming ``marker``, as OpenStack's APIs answer, rather than a page that silently
starts somewhere.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common.exceptions import InvalidInput


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
