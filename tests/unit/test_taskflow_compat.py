"""The fleetflow engine runs only on the TaskFlow series it is tested on.

The installed TaskFlow is faked by replacing the version lookup; the test
that installs a real TaskFlow 6.0 is ``tests/unit/test_taskflow_compat_install.py``.
"""

from __future__ import annotations

import configparser
import logging
import os

import pytest
from taskflow import engines as tf_engines
from taskflow import exceptions as tf_exc
from taskflow.patterns import linear_flow

from fleetflow.engine import engines
from fleetflow.plugin import compat
from fleetflow.plugin.engine import FleetflowParallelEngine
from tests.unit.test_taskflow_compiler import Echo, Produce

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def taskflow_version(monkeypatch):
    """``taskflow_version("6.0.0")``: the version the guard sees for one test."""
    monkeypatch.setattr(compat, "_warned", False)

    def pretend(version):
        monkeypatch.setattr(compat, "installed_version", lambda: version)

    return pretend


@pytest.mark.parametrize("version", ["6.5.0", "6.5.1", "6.5.0rc1"])
def test_the_tested_series_is_supported(version):
    assert compat.is_supported(version)


@pytest.mark.parametrize("version", ["6.0.0", "6.4.9", "6.6.0", "7.5.0", "5.12.0", "junk", None])
def test_any_other_version_is_not(version):
    assert not compat.is_supported(version)


def test_on_an_untested_taskflow_the_stock_engine_runs_and_one_line_says_why(
        taskflow_version, caplog):
    taskflow_version("6.0.0")
    with caplog.at_level(logging.WARNING, logger=compat.__name__):
        assert engines.engine_name("fleetflow-parallel") == "parallel"
        assert engines.engine_options()["engine"] == "parallel"
        assert engines.engine_options(engine="fleetflow-parallel")["engine"] == "parallel"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "TaskFlow 6.0.0" in lines[0] and "6.5" in lines[0] and "stock" in lines[0]


def test_loaded_by_name_on_an_untested_taskflow_the_engine_refuses(taskflow_version):
    taskflow_version("6.6.0")
    flow = linear_flow.Flow("f").add(Produce("a", provides="value"))
    # TaskFlow's loader wraps the engine's refusal, keeping it as the cause.
    with pytest.raises(tf_exc.NotFound) as caught:
        tf_engines.load(flow, engine="fleetflow-parallel")
    assert isinstance(caught.value.cause, compat.UnsupportedTaskFlow)
    assert "TaskFlow 6.6.0" in str(caught.value.cause)
    assert "'parallel'" in str(caught.value.cause)


@pytest.mark.parametrize("engine", ["serial", "parallel", "fleetflow-parallel"])
def test_flows_still_run_on_an_untested_taskflow(taskflow_version, engine):
    taskflow_version("6.6.0")
    flow = linear_flow.Flow("f").add(Produce("a", provides="value"), Echo("b"))
    ran = engines.make_engine(flow, None, None, engine=engine, workers=2)
    ran.run()
    assert ran.storage.fetch("value") == "a"
    assert not isinstance(ran, FleetflowParallelEngine)


def test_on_the_tested_taskflow_the_fleetflow_engine_loads(taskflow_version):
    taskflow_version("6.5.0")
    flow = linear_flow.Flow("f").add(Produce("a", provides="value"))
    loaded = engines.make_engine(flow, None, None, workers=2)
    assert isinstance(loaded, FleetflowParallelEngine)


def test_setup_cfg_pins_the_tested_series():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    requires = [r.strip() for r in parser["options"]["install_requires"].splitlines()]
    major, minor = compat.SUPPORTED
    assert f"taskflow>={major}.{minor},<{major}.{minor + 1}" in requires
