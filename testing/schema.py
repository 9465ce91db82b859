"""A test's database at the newest schema, without running every migration for each test.

Running the migrations (alembic, a dozen revisions on three branches) costs about 0.2 s,
more than most tests. :func:`upgraded_database` runs them once per process, into an
SQLite file of its own, and starts each new SQLite database of a test as a copy of that
file: the same schema, made by the same migrations. A database that already exists, or
is not an SQLite file, is upgraded in place as before.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

import sqlalchemy as sa

_lock = threading.Lock()
_template: str | None = None


def _migrated_file() -> str:
    """The path of this process's migrated SQLite file (made on first use)."""
    global _template
    with _lock:
        if _template is None:
            from fleetflow.persistence.db import Database

            directory = tempfile.mkdtemp(prefix="fleetflow-schema-")
            atexit.register(shutil.rmtree, directory, True)
            path = os.path.join(directory, "schema.db")
            database = Database(f"sqlite:///{path}")
            database.upgrade()
            database.dispose()  # the last connection to close checkpoints the WAL away
            _template = path
        return _template


def _new_sqlite_file(url: str) -> str | None:
    """The file of an SQLite ``url`` that does not exist yet, else None."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return None if os.path.exists(parsed.database) else parsed.database


def upgraded_database(conf):
    """The :class:`~fleetflow.persistence.db.Database` of ``conf``, at the newest schema."""
    from fleetflow.persistence.db import Database

    target = _new_sqlite_file(conf.database.connection)
    if target is not None:
        shutil.copyfile(_migrated_file(), target)
        return Database.from_conf(conf)
    database = Database.from_conf(conf)
    database.upgrade()
    return database
