"""Fixtures of the reliability tests: a cloud whose conductors run in killable subprocesses."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def load_takeover_module():
    """takeover_flow, imported under the same name the conductor subprocesses use."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    return importlib.import_module("takeover_flow")


@pytest.fixture
def takeover():
    """The takeover_flow module (flow, events, TakeoverCloud harness)."""
    return load_takeover_module()


@pytest.fixture
def sql_cloud(takeover, tmp_path):
    """Embedded mode: SQLite database, SQL jobboard, claims of 2 s."""
    cloud = takeover.TakeoverCloud(tmp_path, f"sqlite:///{tmp_path / 'fleetflow.db'}")
    yield cloud
    cloud.close()
