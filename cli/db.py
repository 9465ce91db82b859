"""``fleetflow db``: schema management."""

import click


@click.group()
def db() -> None:
    """Database schema."""


@db.command()
@click.pass_obj
def upgrade(conf) -> None:
    """Create or upgrade every table to the newest migration."""
    from fleetflow.persistence.db import Database

    database = Database.from_conf(conf)
    database.upgrade()
    click.echo(f"database at {database.engine.url.render_as_string()} is up to date")
