"""A TaskFlow persistence backend on SQLAlchemy Core, built for many small checkpoints.

TaskFlow's own SQLAlchemy backend rebuilds its ``MetaData`` and tables on every
connection (so the compiled-statement cache never hits), reads an atom detail
back before each update, and rewrites every atom detail of a flow whenever the
flow's state changes. Here:

- tables and statements are built once, at import (``models``, below);
- an atom detail update (the engine's checkpoint) is ONE ``UPDATE`` in its own
  transaction: TaskFlow's merge replaces every field with the incoming one, so
  reading the row first changes nothing; a missing row still raises NotFound;
- a flow detail update reads its atom rows once and writes only those that are
  new or differ from what is stored (batched), instead of one read + write each;
- SQLite runs in WAL mode with ``synchronous=NORMAL`` and ``BEGIN IMMEDIATE``
  (``persistence.db.create_engine``), PostgreSQL through a connection pool.

Outages: a write (checkpoint, flow or logbook save) that meets a lost
connection runs again, with backoff, within the window of the engine's
Database (``persistence.db_retry``); each is one transaction of absolute
values, so running it twice stores the same.

Durability: every save commits before it returns, so a checkpoint TaskFlow
considers saved survives the death of the process (``kill -9``). With SQLite's
``synchronous=NORMAL`` a power loss may roll back the last commits; use
PostgreSQL (or ``synchronous=FULL``) when that matters.

Configuration (``taskflow.persistence.backends.fetch`` or the constructor)::

    {"connection": "fleetflow+sqlite:///var/fleetflow.db"}    # or fleetflow+postgresql://...
    {"connection": "fleetflow+postgresql://u@h/db", "pool_size": 10, "max_overflow": 20,
     "max_retry_seconds": 120, "retry_interval": 0.5}
    LogbookBackend({}, engine=shared_engine)                     # share a process's engine
"""

from __future__ import annotations

import contextlib

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from taskflow import exceptions as exc
from taskflow.persistence import base

from fleetflow.persistence import db, db_retry, migrate
from fleetflow.persistence.logbook.checkpoint import AtomCheckpoint
from fleetflow.persistence.logbook.models import (
    ATOM_COLUMNS,
    ATOMDETAILS,
    FLOWDETAILS,
    LOGBOOKS,
)
from fleetflow.persistence.logbook.rows import (
    atom_from_row,
    atom_values,
    book_from_row,
    book_values,
    flow_from_row,
    flow_values,
)

SCHEME_PREFIX = "fleetflow+"

# NOTE: statements are built once; an UPDATE without .values() takes its SET
# columns from the parameter keys, which are always the same here, so the
# compiled form is cached after the first use.
_ad, _fd, _lb = ATOMDETAILS.c, FLOWDETAILS.c, LOGBOOKS.c
UPDATE_ATOM = sa.update(ATOMDETAILS).where(_ad.uuid == sa.bindparam("b_uuid"))
INSERT_ATOM = sa.insert(ATOMDETAILS)
SELECT_ATOM = sa.select(ATOMDETAILS).where(_ad.uuid == sa.bindparam("uuid"))
SELECT_ATOMS_OF = (sa.select(ATOMDETAILS)
                   .where(_ad.parent_uuid.in_(sa.bindparam("parents", expanding=True))))
SELECT_ATOM_TEXT_OF = sa.select(_ad.uuid, *(getattr(_ad, c) for c in ATOM_COLUMNS)).where(
    _ad.parent_uuid == sa.bindparam("parent"))
UPDATE_FLOW = sa.update(FLOWDETAILS).where(_fd.uuid == sa.bindparam("b_uuid"))
INSERT_FLOW = sa.insert(FLOWDETAILS)
SELECT_FLOW = sa.select(FLOWDETAILS).where(_fd.uuid == sa.bindparam("uuid"))
SELECT_FLOWS_OF = (sa.select(FLOWDETAILS)
                   .where(_fd.parent_uuid.in_(sa.bindparam("parents", expanding=True))))
UPDATE_BOOK = sa.update(LOGBOOKS).where(_lb.uuid == sa.bindparam("b_uuid"))
INSERT_BOOK = sa.insert(LOGBOOKS)
SELECT_BOOK = sa.select(LOGBOOKS).where(_lb.uuid == sa.bindparam("uuid"))
SELECT_BOOKS = sa.select(LOGBOOKS)
DELETE_BOOK = sa.delete(LOGBOOKS).where(_lb.uuid == sa.bindparam("uuid"))
FLOWS_OF_BOOK = sa.select(_fd.uuid).where(_fd.parent_uuid == sa.bindparam("uuid"))
DELETE_FLOWS_OF_BOOK = sa.delete(FLOWDETAILS).where(_fd.parent_uuid == sa.bindparam("uuid"))
DELETE_ATOMS_OF_BOOK = sa.delete(ATOMDETAILS).where(_ad.parent_uuid.in_(FLOWS_OF_BOOK))


def _populate_flows(conn, flows: list) -> None:
    """Fill flow details with their atom details (one query for all of them)."""
    if not flows:
        return
    by_uuid = {fd.uuid: fd for fd in flows}
    for row in conn.execute(SELECT_ATOMS_OF, {"parents": list(by_uuid)}).mappings():
        by_uuid[row["parent_uuid"]].add(atom_from_row(row))


def _write_flow(conn, fd, parent_uuid, insert_if_missing: bool) -> list:
    """Store ``fd`` and its atom details; return stored atoms ``fd`` lacks.

    Atom rows that already hold exactly what ``fd`` has are not rewritten: a
    flow's state change otherwise rewrites every atom of the flow.
    """
    updated = conn.execute(UPDATE_FLOW, {"b_uuid": fd.uuid, **flow_values(fd)})
    stored = {}
    if updated.rowcount == 0:
        if not insert_if_missing:
            raise exc.NotFound(f"No flow details found with uuid '{fd.uuid}'")
        conn.execute(INSERT_FLOW, {"uuid": fd.uuid, "parent_uuid": parent_uuid,
                                   **flow_values(fd)})
    else:
        stored = {row[0]: tuple(row[1:])
                  for row in conn.execute(SELECT_ATOM_TEXT_OF, {"parent": fd.uuid})}
    inserts, updates = [], []
    for ad in fd:
        values = atom_values(ad)
        old = stored.pop(ad.uuid, None)
        if old is None:
            inserts.append({"uuid": ad.uuid, "parent_uuid": fd.uuid, **values})
        elif old != tuple(values[c] for c in ATOM_COLUMNS):
            updates.append({"b_uuid": ad.uuid, **values})
    if inserts:
        conn.execute(INSERT_ATOM, inserts)
    if updates:
        conn.execute(UPDATE_ATOM, updates)
    if not stored:
        return []
    # Atoms another writer added: return them, as TaskFlow's backends do.
    rows = conn.execute(sa.select(ATOMDETAILS).where(_ad.uuid.in_(list(stored)))).mappings()
    return [atom_from_row(row) for row in rows]


class LogbookBackend(base.Backend):
    """TaskFlow persistence backend storing logbooks in fleetflow's ``tf_`` tables."""

    def __init__(self, conf, engine: sa.Engine | None = None):
        super().__init__(conf)
        self._owns_engine = engine is None
        if engine is None:
            url = self._conf.get("connection")
            if not url:
                raise ValueError("A 'connection' URL (or an engine) is required")
            if url.startswith(SCHEME_PREFIX):
                url = url[len(SCHEME_PREFIX):]
            engine = db.create_engine(url, pool_size=int(self._conf.get("pool_size", 10)),
                                      max_overflow=int(self._conf.get("max_overflow", 20)))
            db_retry.register(engine, db_retry.RetryPolicy(
                float(self._conf.get("max_retry_seconds",
                                     db_retry.DEFAULT_MAX_RETRY_SECONDS)),
                float(self._conf.get("retry_interval", db_retry.DEFAULT_RETRY_INTERVAL))))
        self._engine = engine
        self._checkpoint = AtomCheckpoint(engine)
        # A shared engine brings the window its Database was configured with.
        self.retry_policy = db_retry.policy_for(engine)

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    def get_connection(self):
        # Cheap: TaskFlow's storage asks for a connection per save.
        return LogbookConnection(self)

    def close(self):
        if self._owns_engine:
            self._engine.dispose()


class LogbookConnection(base.Connection):
    """Stateless view of a :class:`LogbookBackend`; each call is one transaction."""

    def __init__(self, backend: LogbookBackend):
        self._backend = backend
        self._engine = backend.engine
        self._checkpoint = backend._checkpoint
        self._retrying = backend.retry_policy.run

    @property
    def backend(self):
        return self._backend

    def close(self):
        pass

    @contextlib.contextmanager
    def _transaction(self, what: str):
        """One committed transaction; database errors become StorageFailure.

        StorageFailure is what TaskFlow's storage retries on; NotFound passes
        through untouched (and rolls the transaction back).
        """
        try:
            with self._engine.begin() as conn:
                yield conn
        except sa_exc.SQLAlchemyError:
            exc.raise_with_cause(exc.StorageFailure, f"Failed {what}")

    # -- schema -------------------------------------------------------------

    def upgrade(self):
        """Bring the schema (all of fleetflow's migrations) to the newest version."""
        try:
            migrate.upgrade(self._engine)
        except sa_exc.SQLAlchemyError:
            exc.raise_with_cause(exc.StorageFailure, "Failed upgrading the logbook schema")

    def validate(self):
        with self._transaction("validating the logbook backend") as conn:
            conn.execute(sa.select(sa.func.count()).select_from(LOGBOOKS)).scalar()

    def clear_all(self):
        with self._transaction("clearing all logbooks") as conn:
            conn.execute(sa.delete(ATOMDETAILS))
            conn.execute(sa.delete(FLOWDETAILS))
            conn.execute(sa.delete(LOGBOOKS))

    # -- writes --------------------------------------------------------------

    def update_atom_details(self, atom_detail, ignore_missing=False):
        """Store an atom detail with one UPDATE (its checkpoint); returns it."""
        return self._retrying(lambda: self._update_atom(atom_detail, ignore_missing),
                              "saving a checkpoint")

    def _update_atom(self, atom_detail, ignore_missing):
        values = atom_values(atom_detail)
        if self._checkpoint({"b_uuid": atom_detail.uuid, **values}):
            return atom_detail
        if not ignore_missing:
            raise exc.NotFound(f"No atom details found with uuid '{atom_detail.uuid}'")
        with self._transaction(f"inserting atom details '{atom_detail.uuid}'") as conn:
            conn.execute(INSERT_ATOM, {"uuid": atom_detail.uuid, "parent_uuid": None,
                                       **atom_values(atom_detail)})
        return atom_detail

    def update_atom_details_many(self, atom_details) -> None:
        """Store existing atom details in ONE transaction (a batch of checkpoints).

        Every one of them must have a row already (as ``update_atom_details``
        without ``ignore_missing``): those that have are written, then
        NotFound names the others.
        """
        rows = [{"b_uuid": ad.uuid, **atom_values(ad)} for ad in atom_details]
        if rows:
            self._retrying(lambda: self._update_atoms(rows), "saving checkpoints")

    def _update_atoms(self, rows: list[dict]) -> None:
        matched = self._checkpoint.many(rows)
        if matched == len(rows):
            return
        with self._transaction("looking up atom details") as conn:
            found = set(conn.execute(sa.select(_ad.uuid).where(
                _ad.uuid.in_([row["b_uuid"] for row in rows]))).scalars())
        missing = [row["b_uuid"] for row in rows if row["b_uuid"] not in found]
        if not missing:  # a driver that does not add up executemany's row counts
            return
        raise exc.NotFound(f"No atom details found with uuids {missing}")

    def update_flow_details(self, flow_detail, ignore_missing=False):
        """Store a flow detail and its atom details; returns the stored whole."""
        return self._retrying(lambda: self._update_flow(flow_detail, ignore_missing),
                              f"saving flow details '{flow_detail.uuid}'")

    def _update_flow(self, flow_detail, ignore_missing):
        with self._transaction(f"updating flow details '{flow_detail.uuid}'") as conn:
            extra = _write_flow(conn, flow_detail, None, insert_if_missing=ignore_missing)
        result = flow_detail.copy()
        for ad in extra:
            result.add(ad)
        return result

    def update_flow_fields(self, flow_detail):
        """Store only the flow's own fields (name, state, meta), none of its atoms.

        For a caller whose atom details are stored already (the fleetflow engine's
        storage): ``update_flow_details`` would read every atom row back and compare.
        """
        def write():
            with self._transaction(f"updating flow '{flow_detail.uuid}'") as conn:
                values = {"b_uuid": flow_detail.uuid, **flow_values(flow_detail)}
                if conn.execute(UPDATE_FLOW, values).rowcount == 0:
                    raise exc.NotFound(f"No flow details found with uuid '{flow_detail.uuid}'")
            return flow_detail
        return self._retrying(write, f"saving flow details '{flow_detail.uuid}'")

    def save_logbook(self, book):
        """Insert or update a logbook with all its flow and atom details."""
        return self._retrying(lambda: self._save_book(book), f"saving logbook '{book.uuid}'")

    def _save_book(self, book):
        with self._transaction(f"saving logbook '{book.uuid}'") as conn:
            values = book_values(book)
            if conn.execute(UPDATE_BOOK, {"b_uuid": book.uuid, **values}).rowcount == 0:
                conn.execute(INSERT_BOOK, {"uuid": book.uuid, **values})
            result = book.copy()
            for fd in book:
                extra = _write_flow(conn, fd, book.uuid, insert_if_missing=True)
                if extra:
                    merged = fd.copy()
                    for ad in extra:
                        merged.add(ad)
                    result.add(merged)
            # Flow details of this book saved by someone else come back too.
            known = {fd.uuid for fd in book}
            others = [flow_from_row(row)
                      for row in conn.execute(SELECT_FLOWS_OF, {"parents": [book.uuid]})
                      .mappings() if row["uuid"] not in known]
            _populate_flows(conn, others)
            for fd in others:
                result.add(fd)
        return result

    def destroy_logbook(self, book_uuid):
        with self._transaction(f"destroying logbook '{book_uuid}'") as conn:
            # Explicit child deletes: SQLite enforces ON DELETE CASCADE only
            # with PRAGMA foreign_keys, which a shared engine might not set.
            conn.execute(DELETE_ATOMS_OF_BOOK, {"uuid": book_uuid})
            conn.execute(DELETE_FLOWS_OF_BOOK, {"uuid": book_uuid})
            if conn.execute(DELETE_BOOK, {"uuid": book_uuid}).rowcount == 0:
                raise exc.NotFound(f"No logbook found with uuid '{book_uuid}'")

    # -- reads ---------------------------------------------------------------

    def get_logbook(self, book_uuid, lazy=False):
        with self._transaction(f"getting logbook '{book_uuid}'") as conn:
            row = conn.execute(SELECT_BOOK, {"uuid": book_uuid}).mappings().first()
            if row is None:
                raise exc.NotFound(f"No logbook found with uuid '{book_uuid}'")
            book = book_from_row(row)
            if not lazy:
                flows = [flow_from_row(r) for r in
                         conn.execute(SELECT_FLOWS_OF, {"parents": [book_uuid]}).mappings()]
                _populate_flows(conn, flows)
                for fd in flows:
                    book.add(fd)
        return book

    def get_logbooks(self, lazy=False):
        with self._transaction("getting logbooks") as conn:
            books = [book_from_row(r) for r in conn.execute(SELECT_BOOKS).mappings()]
            if not lazy and books:
                by_uuid = {b.uuid: b for b in books}
                flows = []
                for row in conn.execute(SELECT_FLOWS_OF, {"parents": list(by_uuid)}).mappings():
                    fd = flow_from_row(row)
                    by_uuid[row["parent_uuid"]].add(fd)
                    flows.append(fd)
                _populate_flows(conn, flows)
        yield from books

    def get_flows_for_book(self, book_uuid, lazy=False):
        with self._transaction(f"getting flow details of logbook '{book_uuid}'") as conn:
            flows = [flow_from_row(r) for r in
                     conn.execute(SELECT_FLOWS_OF, {"parents": [book_uuid]}).mappings()]
            if not lazy:
                _populate_flows(conn, flows)
        yield from flows

    def get_flow_details(self, fd_uuid, lazy=False):
        with self._transaction(f"getting flow details '{fd_uuid}'") as conn:
            row = conn.execute(SELECT_FLOW, {"uuid": fd_uuid}).mappings().first()
            if row is None:
                raise exc.NotFound(f"No flow details found with uuid '{fd_uuid}'")
            fd = flow_from_row(row)
            if not lazy:
                _populate_flows(conn, [fd])
        return fd

    def get_atom_details(self, ad_uuid):
        with self._transaction(f"getting atom details '{ad_uuid}'") as conn:
            row = conn.execute(SELECT_ATOM, {"uuid": ad_uuid}).mappings().first()
            if row is None:
                raise exc.NotFound(f"No atom details found with uuid '{ad_uuid}'")
        return atom_from_row(row)

    def get_atoms_for_flow(self, fd_uuid):
        with self._transaction(f"getting atom details of flow '{fd_uuid}'") as conn:
            rows = conn.execute(SELECT_ATOMS_OF, {"parents": [fd_uuid]}).mappings().all()
        yield from (atom_from_row(row) for row in rows)
