"""A flow checkpointed under one engine resumes under the other, both ways.

Each flow detail records the engine and checkpoint semantics that first ran
it (``plugin.flow_meta``). Here a flow is stopped mid-way under one engine
(suspended in-process, or its process SIGKILLed after a task's side effect and
before its checkpoint) and resumed from the SQLite logbook under the other:
every task's effect is there exactly as often as an idempotent re-run allows,
the result is the one an uninterrupted run gives, and the record keeps the
first engine.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys

import pytest
from taskflow import states as st
from taskflow.patterns import linear_flow
from taskflow.persistence import backends as tf_backends
from taskflow.persistence import models

from fleetflow.common.crash_points import CRASH_ENV
from fleetflow.engine import engines
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.plugin import flow_meta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
ENGINES = ["fleetflow-parallel", "parallel"]
SWITCHES = [pytest.param(first, second, id=f"{first}-then-{second}")
            for first in ENGINES for second in ENGINES if first != second]
RECORDED = {"fleetflow-parallel": ("fleetflow-parallel/1", "batched"),
            "parallel": ("parallel", "immediate")}


class Effect(FleetTask):
    """Appends its name to a file (its side effect) and returns its input plus one."""

    def execute(self, effects_path, value):
        with open(effects_path, "a") as f:
            f.write(self.name + "\n")
        return value + 1


def build_flow():
    return linear_flow.Flow("chain").add(
        Effect("a", provides="va", rebind={"value": "start"}),
        Effect("b", provides="vb", rebind={"value": "va"}),
        Effect("c", provides="vc", rebind={"value": "vb"}))


def _backend(url):
    return tf_backends.fetch({"connection": "fleetflow+" + url})


def _new_flow_detail(backend) -> str:
    book = models.LogBook("book")
    flow_detail = models.FlowDetail("chain", uuid=book.uuid)
    book.add(flow_detail)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.save_logbook(book)
    return flow_detail.uuid


def _load(backend, flow_uuid):
    with contextlib.closing(backend.get_connection()) as conn:
        return conn.get_flow_details(flow_uuid)


def _run(backend, flow_uuid, engine_name, effects_path):
    engine = engines.make_engine(build_flow(), _load(backend, flow_uuid), backend,
                                 engine=engine_name, workers=2,
                                 store={"effects_path": effects_path, "start": 0})
    return engine


def _effects(path) -> list[str]:
    with open(path) as f:
        return f.read().split()


def _resume_and_check(backend, flow_uuid, first, second, effects_path, caplog):
    with caplog.at_level(logging.INFO, logger=flow_meta.__name__):
        engine = _run(backend, flow_uuid, second, effects_path)
        engine.run()
    stored = _load(backend, flow_uuid)
    assert stored.state == st.SUCCESS
    assert {ad.name: ad.results for ad in stored if ad.name in "abc"} == \
        {"a": 1, "b": 2, "c": 3}
    assert (stored.meta[flow_meta.ENGINE_KEY], stored.meta[flow_meta.CHECKPOINTS_KEY]) == \
        RECORDED[first]
    switched = [r.getMessage() for r in caplog.records if "resumes under" in r.getMessage()]
    assert len(switched) == 1 and RECORDED[first][0] in switched[0]


@pytest.mark.parametrize(("first", "second"), SWITCHES)
def test_a_suspended_flow_resumes_under_the_other_engine(url, tmp_path, first, second,
                                                          caplog):
    effects_path = str(tmp_path / "effects")
    backend = _backend(url)
    flow_uuid = _new_flow_detail(backend)
    engine = _run(backend, flow_uuid, first, effects_path)
    engine.atom_notifier.register(
        st.SUCCESS, lambda state, details: details["task_name"] == "b" and engine.suspend())
    engine.run()
    assert _load(backend, flow_uuid).state == st.SUSPENDED
    assert _effects(effects_path) == ["a", "b"]

    _resume_and_check(backend, flow_uuid, first, second, effects_path, caplog)
    assert _effects(effects_path) == ["a", "b", "c"]
    backend.close()


_CHILD = """
import sys
from tests.unit.engine import test_engine_switch as t
backend = t._backend(sys.argv[1])
t._run(backend, sys.argv[2], sys.argv[3], sys.argv[4]).run()
"""


@pytest.mark.parametrize(("first", "second"), SWITCHES)
def test_a_flow_killed_mid_way_resumes_under_the_other_engine(url, tmp_path, first, second,
                                                               caplog):
    effects_path = str(tmp_path / "effects")
    backend = _backend(url)
    flow_uuid = _new_flow_detail(backend)
    # "b" has done its effect and is killed before its SUCCESS is stored.
    child = subprocess.run([sys.executable, "-c", _CHILD, url, flow_uuid, first, effects_path],
                           cwd=ROOT, env={**os.environ, CRASH_ENV: "b:after-effect"},
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    states = {ad.name: ad.state for ad in _load(backend, flow_uuid)}
    assert states["a"] == st.SUCCESS and states["b"] == st.RUNNING
    assert _effects(effects_path) == ["a", "b"]

    _resume_and_check(backend, flow_uuid, first, second, effects_path, caplog)
    # "b" runs again (it never got its checkpoint), "a" does not.
    assert _effects(effects_path) == ["a", "b", "b", "c"]
    backend.close()


def test_the_fleetflow_engine_refuses_a_flow_of_a_newer_version_of_itself(url, tmp_path):
    backend = _backend(url)
    flow_uuid = _new_flow_detail(backend)
    flow_detail = _load(backend, flow_uuid)
    flow_detail.meta[flow_meta.ENGINE_KEY] = "fleetflow-parallel/2"
    with contextlib.closing(backend.get_connection()) as conn:
        conn.update_flow_details(flow_detail)
    engine = _run(backend, flow_uuid, "fleetflow-parallel", str(tmp_path / "effects"))
    with pytest.raises(flow_meta.NewerEngineVersion, match="fleetflow-parallel/2"):
        engine.run()
    assert not os.path.exists(tmp_path / "effects")
    backend.close()
