"""Fixtures shared by unit tests: a migrated SQLite file, fake hosts."""

from __future__ import annotations

import os
import shutil

import pytest

from fleetflow.persistence.db import Database


@pytest.fixture(scope="module")
def migrated_file(tmp_path_factory):
    """One migrated SQLite file per module; each test gets a copy (migrating is slow)."""
    path = tmp_path_factory.mktemp("template") / "logbooks.db"
    database = Database(f"sqlite:///{path}")
    database.upgrade()
    database.dispose()  # the last connection to close checkpoints the WAL away
    assert not os.path.exists(f"{path}-wal")
    return path


@pytest.fixture
def url(tmp_path, migrated_file):
    """A fresh copy of the migrated file, as a SQLAlchemy URL."""
    path = tmp_path / "logbooks.db"
    shutil.copyfile(migrated_file, path)
    return f"sqlite:///{path}"


@pytest.fixture
def fake_drivers(tmp_path):
    """``make(setup, **driver_kwargs)``: a FakeDriver on this test's state file,
    ``setup(driver)`` run on it (hosts, topology, backends); all closed afterwards.
    Several drivers made in one test share the file, as processes do."""
    from fleetflow.compute.drivers.fake import FakeDriver

    made = []

    def make(setup, **kwargs):
        driver = FakeDriver(str(tmp_path / "hosts.db"), **kwargs)
        setup(driver)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.close()
