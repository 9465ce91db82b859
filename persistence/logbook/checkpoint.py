"""The engine's checkpoint: atom detail UPDATEs, as cheap as they can be made."""

from __future__ import annotations

import contextlib

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from taskflow import exceptions as exc

from fleetflow.persistence.logbook.models import ATOM_COLUMNS, ATOMDETAILS, utcnow


class AtomCheckpoint:
    """The atom detail UPDATE, compiled once per engine, run on a pooled DBAPI connection.

    This is the statement the engine issues for every state change of every
    atom, so it skips SQLAlchemy's per-execution machinery (events, result
    objects): one ``UPDATE``, or one ``executemany`` of them (:meth:`many`),
    on a connection from the engine's pool, committed before returning. On
    SQLite the pool's connections run in autocommit mode (``persistence.db``):
    a lone UPDATE is its own transaction and takes the write lock itself,
    waiting up to the busy timeout; a batch runs inside ``BEGIN IMMEDIATE``.
    On PostgreSQL either is followed by COMMIT.
    """

    COLUMNS = (*ATOM_COLUMNS, "updated_at")

    def __init__(self, engine: sa.Engine):
        statement = (sa.update(ATOMDETAILS).where(ATOMDETAILS.c.uuid == sa.bindparam("b_uuid"))
                     .values({c: sa.bindparam(c) for c in self.COLUMNS}))
        dialect = engine.dialect
        compiled = statement.compile(dialect=dialect)
        self._engine = engine
        self._sql = compiled.string
        self._order = compiled.positiontup if dialect.positional else None
        self._errors = dialect.loaded_dbapi.Error
        # SQLite's pool connections are in autocommit mode: a batch needs its
        # own transaction, taken for writing at once (as every write here is).
        self._begin = "BEGIN IMMEDIATE" if dialect.name == "sqlite" else None
        # Only updated_at may need converting (SQLite stores datetimes as text).
        column_type = ATOMDETAILS.c.updated_at.type
        self._when = column_type.dialect_impl(dialect).bind_processor(dialect)

    def _bind(self, params: dict, when):
        params["updated_at"] = when
        return tuple(params[k] for k in self._order) if self._order else params

    def __call__(self, params: dict) -> int:
        """Run the UPDATE; returns the number of rows it matched."""
        return self.many([params])

    def many(self, rows: list[dict]) -> int:
        """Run one UPDATE per row in one transaction; returns the rows matched in all."""
        now = utcnow()
        when = self._when(now) if self._when else now
        args = [self._bind(params, when) for params in rows]
        try:
            raw = self._engine.raw_connection()
        except sa_exc.SQLAlchemyError:  # pool timeout, cannot connect
            exc.raise_with_cause(exc.StorageFailure, "No connection for an atom checkpoint")
        try:
            return self._run(raw, args)
        except self._errors:
            with contextlib.suppress(Exception):
                raw.rollback()
            exc.raise_with_cause(exc.StorageFailure, "Failed writing an atom checkpoint")
        finally:
            raw.close()

    def _run(self, raw, args: list) -> int:
        cursor = raw.cursor()
        try:
            if len(args) == 1:
                cursor.execute(self._sql, args[0])
            else:
                if self._begin:
                    cursor.execute(self._begin)
                cursor.executemany(self._sql, args)
            matched = cursor.rowcount
        finally:
            cursor.close()
        raw.commit()
        return matched
