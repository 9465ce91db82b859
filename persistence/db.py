"""SQLAlchemy engine, sessions and schema upgrades for every fleetflow table.

One ``Database`` per process and URL. SQLite (the embedded default) runs in WAL
mode with ``synchronous=NORMAL`` and a busy timeout, so API threads, conductor
threads and other processes can share the file; PostgreSQL uses a pool.

Writing sessions start with ``BEGIN IMMEDIATE`` (SQLite's single write lock).
Sessions that only read (:meth:`Database.read_session`) begin a deferred
transaction instead: in WAL mode a consistent snapshot that takes no lock, so
a client polling a large reservation never holds up the engine's writes.

A lost PostgreSQL connection is waited out by the writers that matter
(:meth:`Database.retrying`, ``persistence.db_retry``); the pool pings each
connection it lends, so one that died in a server restart is replaced
rather than handed to them.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy import event, orm

from fleetflow.persistence import db_retry

# Naming convention so alembic migrations can name (and later drop) constraints
# the same way on SQLite and PostgreSQL.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(orm.DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING)


SQLITE_BUSY_TIMEOUT_MS = 30_000
# Connections of one SQLite engine, every one kept once opened: SQLAlchemy's
# default bound (5 kept, 10 more closed on their return). With 5 kept, the
# threads of a vcluster's members or a reservation's groups opened and closed
# about ten an operation, each paying SQLite's parse of the whole schema
# (0.35 ms) at its first statement.
SQLITE_CONNECTIONS = 15


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


READ_ONLY = "fleetflow_read_only"


def _sqlite_begin(conn) -> None:
    # NOTE: pysqlite's deferred BEGIN lets two writers both read, then one
    # fails with "database is locked" on its first write without waiting for
    # the busy timeout. BEGIN IMMEDIATE takes the write lock up front (and
    # waits for it), which is what compare-and-swap writers need. Read-only
    # sessions say so and get a deferred BEGIN: a WAL snapshot, no lock.
    if conn.get_execution_options().get(READ_ONLY):
        conn.exec_driver_sql("BEGIN")
        return
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_engine(url: str, pool_size: int = 10, max_overflow: int = 20) -> sa.Engine:
    """An engine for ``url`` with fleetflow's per-dialect settings applied."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        memory = parsed.database in (None, "", ":memory:")
        if not memory:
            directory = os.path.dirname(os.path.abspath(parsed.database))
            os.makedirs(directory, exist_ok=True)
        kwargs: dict = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        if memory:
            kwargs["poolclass"] = sa.pool.StaticPool
        else:
            kwargs.update(pool_size=SQLITE_CONNECTIONS, max_overflow=0)
        engine = sa.create_engine(parsed, **kwargs)
        # Let SQLAlchemy, not pysqlite, decide when transactions begin.
        engine.dialect.isolation_level = None

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, record):
            dbapi_conn.isolation_level = None
            _sqlite_pragmas(dbapi_conn, record)

        event.listen(engine, "begin", _sqlite_begin)
        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in ("", None):
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    # pool_pre_ping: after a server restart every pooled connection is dead;
    # the ping replaces each before it is lent instead of failing its user.
    return sa.create_engine(parsed, pool_size=pool_size, max_overflow=max_overflow,
                            pool_pre_ping=True)


class Database:
    """An engine plus a session factory; share one per process and URL."""

    def __init__(self, url: str, pool_size: int = 10, max_overflow: int = 20,
                 max_retry_seconds: float = db_retry.DEFAULT_MAX_RETRY_SECONDS,
                 retry_interval: float = db_retry.DEFAULT_RETRY_INTERVAL):
        self.url = url
        self.engine = create_engine(url, pool_size=pool_size, max_overflow=max_overflow)
        # Registered on the engine: the logbook backend shares it, not the conf.
        self.retry_policy = db_retry.RetryPolicy(max_retry_seconds, retry_interval)
        db_retry.register(self.engine, self.retry_policy)
        self.sessionmaker = orm.sessionmaker(self.engine, expire_on_commit=False)
        reads = {READ_ONLY: True}
        if self.engine.dialect.name == "postgresql":
            # One snapshot for the whole read session, as SQLite's deferred transaction
            # gives: under READ COMMITTED each statement would see later commits (the
            # queue's admission pass read the fleet, then which admitted requests had
            # claimed, and missed a claim committed in between). A read-only
            # transaction under REPEATABLE READ never fails to serialize.
            reads["isolation_level"] = "REPEATABLE READ"
        self.read_engine = self.engine.execution_options(**reads)
        self.read_sessionmaker = orm.sessionmaker(self.read_engine, expire_on_commit=False)

    @classmethod
    def from_conf(cls, conf) -> Database:
        group = conf.database
        return cls(group.connection, group.pool_size, group.max_overflow,
                   getattr(group, "max_retry_seconds", db_retry.DEFAULT_MAX_RETRY_SECONDS),
                   getattr(group, "retry_interval", db_retry.DEFAULT_RETRY_INTERVAL))

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def retrying(self, fn, what: str):
        """``fn()``, re-run while the database is unreachable, up to ``max_retry_seconds``.

        ``fn`` must be safe to run again: it opens its own transaction (a
        failed one rolled back; a commit whose answer was lost may have
        happened). Raises ``db_retry.DatabaseUnavailable`` once the window is over.
        """
        return self.retry_policy.run(fn, what)

    @contextlib.contextmanager
    def session(self) -> Iterator[orm.Session]:
        """A session in one transaction: committed on success, rolled back on error."""
        with self.sessionmaker() as session, session.begin():
            yield session

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """A Core connection in one transaction, for statements that need no ORM.

        Half the cost of :meth:`session` for a single UPDATE (no Session,
        no identity map): the per-instance writes of a large reservation.
        """
        with self.engine.begin() as connection:
            yield connection

    @contextlib.contextmanager
    def read_session(self) -> Iterator[orm.Session]:
        """A session for reads only: one consistent snapshot that blocks no writer.

        On SQLite it never takes the write lock. Writes belong in
        :meth:`session`: here they would have to upgrade a deferred
        transaction, which fails at once if another writer got in first.
        """
        with self.read_sessionmaker() as session, session.begin():
            yield session

    @contextlib.contextmanager
    def reading(self) -> Iterator[sa.Connection]:
        """A Core connection in one read-only transaction: :meth:`read_session`'s
        snapshot without a Session, for the few reads polled many times a second."""
        with self.read_engine.begin() as connection:
            yield connection

    def upgrade(self) -> None:
        """Bring the schema to the newest migration (idempotent)."""
        from fleetflow.persistence import migrate

        migrate.upgrade(self.engine)

    def dispose(self) -> None:
        self.engine.dispose()


_lock = threading.Lock()
_databases: dict[str, Database] = {}


def get_database(conf) -> Database:
    """The process-wide Database for ``conf``'s connection URL."""
    url = conf.database.connection
    with _lock:
        db = _databases.get(url)
        if db is None:
            db = _databases[url] = Database.from_conf(conf)
        return db
