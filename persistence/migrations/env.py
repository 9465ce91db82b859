"""Alembic environment: runs on the connection handed in by ``migrate.upgrade``."""

from alembic import context

import fleetflow.persistence.all_models  # noqa: F401  (registers every table)
from fleetflow.persistence.db import Base

config = context.config
target_metadata = Base.metadata


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        import sqlalchemy as sa

        engine = sa.create_engine(config.get_main_option("sqlalchemy.url"))
        with engine.begin() as connection:
            _configure_and_run(connection)
        return
    _configure_and_run(connection)


def _configure_and_run(connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


run()
