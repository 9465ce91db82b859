"""The speed-ups go in only on the TaskFlow series they are tested on.

The installed TaskFlow is faked by replacing the version lookup; no other
TaskFlow is installed.
"""

from __future__ import annotations

import configparser
import logging
import os

import pytest
from taskflow.engines.action_engine import scopes
from taskflow.patterns import linear_flow

from fleetflow.engine import engines, taskflow_compat, taskflow_patches
from tests.unit.test_taskflow_patches import Echo, Produce

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def taskflow_version(stock, monkeypatch):
    """``taskflow_version("6.0.0")``: the version the guard sees, stock TaskFlow meanwhile.

    ``stock`` comes first so that it puts the speed-ups back after the real
    version lookup is restored."""
    monkeypatch.setattr(taskflow_compat, "_warned", False)

    def pretend(version):
        monkeypatch.setattr(taskflow_compat, "installed_version", lambda: version)

    return pretend


@pytest.mark.parametrize("version", ["6.5.0", "6.5.1", "6.5.0rc1"])
def test_the_tested_series_is_supported(version):
    assert taskflow_compat.is_supported(version)


@pytest.mark.parametrize("version", ["6.0.0", "6.4.9", "6.6.0", "7.5.0", "5.12.0", "junk", None])
def test_any_other_version_is_not(version):
    assert not taskflow_compat.is_supported(version)


def test_on_an_untested_taskflow_nothing_is_installed_and_one_line_says_why(
        taskflow_version, caplog):
    taskflow_version("6.0.0")
    with caplog.at_level(logging.WARNING, logger=taskflow_compat.__name__):
        assert taskflow_patches.apply() is False
        assert taskflow_patches.apply() is False
        engines.engine_options()
    assert not taskflow_patches.is_applied()
    assert scopes.ScopeWalker is taskflow_patches.STOCK_SCOPE_WALKER
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "TaskFlow 6.0.0" in lines[0] and "6.5" in lines[0] and "stock" in lines[0]


@pytest.mark.parametrize("engine", ["serial", "parallel"])
def test_the_stock_engine_still_runs_on_an_untested_taskflow(taskflow_version, engine):
    taskflow_version("6.6.0")
    flow = linear_flow.Flow("f").add(Produce("a", provides="value"), Echo("b"))
    ran = engines.make_engine(flow, None, None, engine=engine, workers=2)
    ran.run()
    assert ran.storage.fetch("value") == "a"
    assert not taskflow_patches.is_applied()


def test_on_the_tested_taskflow_the_speed_ups_go_in(taskflow_version):
    taskflow_version("6.5.0")
    assert taskflow_patches.apply() is True
    assert taskflow_patches.is_applied()


def test_setup_cfg_pins_the_tested_series():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    requires = [r.strip() for r in parser["options"]["install_requires"].splitlines()]
    major, minor = taskflow_compat.SUPPORTED
    assert f"taskflow>={major}.{minor},<{major}.{minor + 1}" in requires
