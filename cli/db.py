"""``fleetflow db``: schema management."""

import click


@click.group()
def db() -> None:
    """Database schema."""


@db.command()
@click.pass_obj
def upgrade(conf) -> None:
    """Create or upgrade every table to the newest migration.

    The database itself must exist (SQLite files excepted): on PostgreSQL,
    ``createdb NAME`` or ``CREATE DATABASE NAME;`` first.
    """
    import sqlalchemy as sa

    from fleetflow.persistence.db import Database

    database = Database.from_conf(conf)
    url = database.engine.url
    try:
        database.upgrade()
    except sa.exc.OperationalError as exc:
        raise click.ClickException(_unreachable(url, exc)) from None
    click.echo(f"database at {url.render_as_string()} is up to date")


def _unreachable(url, exc) -> str:
    """One line saying why the database cannot be reached and, when it is missing, how to
    make it."""
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    where = url.render_as_string()
    if f'database "{url.database}" does not exist' in reason:
        server = " ".join(f"{flag} {value}" for flag, value in (
            ("-h", url.host), ("-p", url.port), ("-U", url.username)) if value)
        return (f'database "{url.database}" does not exist at {where}: create it first '
                f"(createdb {server} {url.database}, or in psql: CREATE DATABASE "
                f'"{url.database}";), then run fleetflow db upgrade again')
    return f"cannot reach the database at {where}: {reason}"
