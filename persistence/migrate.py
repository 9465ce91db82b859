"""Alembic, driven from code: ``upgrade`` brings any database to the newest schema.

The history has one branch per part of the system (``fleet`` is the base;
placement and the engine add their own branches that depend on it), so parts
can add migrations without serialising on one chain; ``heads`` upgrades all.
"""

from __future__ import annotations

import functools
import os

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

MIGRATIONS_DIR = os.path.join(os.path.dirname(__file__), "migrations")


def alembic_config(engine: sa.Engine | None = None, connection=None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS_DIR)
    cfg.attributes["connection"] = connection
    if engine is not None:
        cfg.set_main_option("sqlalchemy.url",
                            engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def upgrade(engine: sa.Engine, revision: str = "heads") -> None:
    with engine.begin() as connection:
        command.upgrade(alembic_config(engine, connection), revision)


def current_heads(engine: sa.Engine) -> set[str]:
    with engine.connect() as connection:
        return set(MigrationContext.configure(connection).get_current_heads())


@functools.cache
def history() -> ScriptDirectory:
    """The migration history, read once a process: alembic compiles every migration
    file to build it (the largest part of a conductor's start-up), and the files are
    the installed package's own."""
    return ScriptDirectory.from_config(alembic_config())


def script_heads() -> set[str]:
    return set(history().get_heads())


def is_current(engine: sa.Engine) -> bool:
    """True when every head of the history has been applied.

    A branch that ``depends_on`` another branch's head absorbs it in the
    version table (only the dependent revision is stored), so compare the
    applied revisions and their ancestors, not the stored rows, with the heads.
    """
    script = history()
    applied = {rev.revision
               for rev in script.iterate_revisions(tuple(current_heads(engine)), "base")}
    return script_heads() <= applied
