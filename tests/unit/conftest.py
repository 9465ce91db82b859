"""Fixtures shared by the unit tests of fleetflow's TaskFlow patches."""

from __future__ import annotations

import pytest

from fleetflow.engine import taskflow_patches


@pytest.fixture
def taskflow_patched():
    """fleetflow's TaskFlow patches installed (modules mark themselves with it)."""
    taskflow_patches.apply()


@pytest.fixture
def stock(taskflow_patched):
    """Stock TaskFlow for one test, the patches back afterwards."""
    taskflow_patches.remove()
    yield
    taskflow_patches.apply()
