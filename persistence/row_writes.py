"""Status writes to rows of one table by id: the statement built once, many rows
in one round, concurrent writers committed together.

A large run writes one small row change per member (an instance ACTIVE, a
volume AVAILABLE, a group hint). Through the ORM each costs its statement's
construction, the bulk-update machinery and its own transaction, more than
the UPDATE itself; here one prepared statement per set of columns serves
every row, a list of rows goes in one ``executemany``, and writers from many
threads share transactions (``group_commit``).
"""

from __future__ import annotations

import threading
import weakref

import sqlalchemy as sa

from fleetflow.persistence import bulk
from fleetflow.persistence.group_commit import GroupCommit
from fleetflow.persistence.models import utcnow


class RowWrites:
    """Writes to ``table``'s rows by primary key ``id``; each sets ``updated_at``."""

    def __init__(self, table: sa.Table):
        self.table = table
        self._statements: dict[frozenset, sa.Update] = {}
        # One group commit per database (a process may hold several in tests).
        self._writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def statement(self, columns: frozenset) -> sa.Update:
        """The UPDATE of ``columns`` of the row whose id is bound as ``b_id``."""
        statement = self._statements.get(columns)
        if statement is None:
            table = self.table
            statement = self._statements.setdefault(columns, (
                table.update().where(table.c.id == sa.bindparam("b_id"))
                .values({c: sa.bindparam(c, type_=table.c[c].type) for c in columns})))
        return statement

    def update(self, session, row_id: str, **values) -> None:
        """Write one row's columns in ``session`` (ORM session or Core connection)."""
        values["updated_at"] = utcnow()
        session.execute(self.statement(frozenset(values)), {"b_id": row_id, **values})

    def update_each(self, session, values_by_id: dict[str, dict]) -> None:
        """Write each row its own values in ``session``: one ``executemany`` per set
        of columns."""
        now = utcnow()
        self._apply(session, [(row_id, {**values, "updated_at": now})
                              for row_id, values in values_by_id.items()])

    def write(self, database, row_id: str, **values) -> None:
        """:meth:`update` committed on return, with concurrent callers' writes."""
        writer = self._writers.get(database)
        if writer is None:
            with self._lock:
                writer = self._writers.setdefault(
                    database, GroupCommit(database.transaction, self._apply))
        values["updated_at"] = utcnow()
        writer.write((row_id, values))

    def _apply(self, connection, items) -> None:
        by_columns: dict[frozenset, list] = {}
        for row_id, values in items:
            by_columns.setdefault(frozenset(values), []).append((row_id, values))
        direct = bulk.direct(connection)
        for columns, writes in by_columns.items():
            if direct and len(writes) > 1:
                # One SQLite step for them all (``bulk``), not one a row.
                bulk.update_each(connection, self.table,
                                 [{"id": row_id, **values} for row_id, values in writes])
            else:
                connection.execute(self.statement(columns),
                                   [{"b_id": row_id, **values} for row_id, values in writes])
