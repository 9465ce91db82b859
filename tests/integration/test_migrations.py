"""The alembic history creates exactly the tables the models declare."""

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

import fleetflow.persistence.all_models  # noqa: F401
from fleetflow.persistence import migrate
from fleetflow.persistence.db import Base, Database


def _diff(engine):
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), Base.metadata)


def test_upgrade_on_sqlite_matches_models_and_is_idempotent(tmp_path):
    database = Database(f"sqlite:///{tmp_path / 'm.db'}")
    database.upgrade()
    database.upgrade()
    assert migrate.is_current(database.engine)
    assert _diff(database.engine) == []
    with database.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    database.dispose()


def test_upgrade_on_postgresql_matches_models(pg_url):
    database = Database(pg_url)
    database.upgrade()
    assert migrate.is_current(database.engine)
    assert _diff(database.engine) == []
    tables = set(sa.inspect(database.engine).get_table_names())
    assert {"hosts", "reservations", "instances", "server_groups", "fences"} <= tables
    database.dispose()
