"""Fixtures of the reliability tests: a cloud whose conductors run in killable subprocesses."""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
#: The clouds a test made, and where to keep them if it fails (see kept_state.py).
CLOUDS = pytest.StashKey[list]()

FLEETFLOW_ENGINE = "fleetflow-parallel"
STOCK_ENGINE = "parallel"
#: How many atom boundaries of each crash plan run under the stock engine (a seeded
#: sample, FLEETFLOW_TEST_SEED); fleetflow's engine runs them all.
STOCK_BOUNDARIES = int(os.environ.get("FLEETFLOW_STOCK_BOUNDARIES", "12"))
#: Kills of each random-kill test under fleetflow's engine; the stock engine gets half.
RANDOM_KILLS = int(os.environ.get("FLEETFLOW_TEST_RANDOM_KILLS", "20"))


@pytest.fixture(params=[FLEETFLOW_ENGINE, STOCK_ENGINE])
def crash_engine(request, monkeypatch):
    """The engine every conductor subprocess runs (``[conductor] engine``).

    Set in this process's environment, which every cloud copies for its
    subprocesses: request it before the cloud.
    """
    monkeypatch.setenv("FLEETFLOW_CONDUCTOR_ENGINE", request.param)
    return request.param


@pytest.fixture
def boundaries(crash_engine):
    """``pick(plan)``: the crash plan to run under ``crash_engine``.

    Every boundary under fleetflow's engine (the default, whose batched
    checkpoints are the riskier semantics); under the stock engine, which
    stores every checkpoint at once, a seeded sample of STOCK_BOUNDARIES (and
    half the random kills, :func:`random_kills`), so that running both engines
    keeps the suite's time in bounds.
    """
    def pick(plan: list) -> list:
        if crash_engine == FLEETFLOW_ENGINE or len(plan) <= STOCK_BOUNDARIES:
            return list(plan)
        seed = int(os.environ.get("FLEETFLOW_TEST_SEED", "0"))
        chosen = sorted(random.Random(seed).sample(range(len(plan)), STOCK_BOUNDARIES))
        print(f"{crash_engine}: boundaries {chosen} of {len(plan)} (seed {seed})")
        return [plan[i] for i in chosen]

    return pick


@pytest.fixture
def random_kills(crash_engine) -> int:
    """How many random kills a random-kill test makes under ``crash_engine``."""
    return RANDOM_KILLS if crash_engine == FLEETFLOW_ENGINE else max(1, RANDOM_KILLS // 2)


#: What a flow's detail records when each engine ran it first (``plugin.flow_meta``).
RECORDED = {FLEETFLOW_ENGINE: "fleetflow-parallel/1", STOCK_ENGINE: "parallel"}


@pytest.fixture
def assert_run_by_crash_engine(crash_engine):
    """``check(backend, flow_ids)``: every one of these flows was run by ``crash_engine``."""
    from fleetflow.plugin import flow_meta

    def check(backend, flow_ids) -> None:
        with contextlib.closing(backend.get_connection()) as conn:
            recorded = {conn.get_flow_details(flow_id).meta.get(flow_meta.ENGINE_KEY)
                        for flow_id in flow_ids}
        assert recorded == {RECORDED[crash_engine]}

    return check


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's clouds are kept, and its unsettled operations told, in its report."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed or not item.stash.get(CLOUDS, None):
        return
    kept_state = _load("kept_state")
    for workdir, into in item.stash[CLOUDS]:
        if not os.path.isdir(workdir):
            continue
        try:
            kept = kept_state.keep(workdir, into, f"{item.name}-{os.path.basename(workdir)}")
        except OSError as exc:
            report.sections.append(("fleetflow crash state", f"could not keep {workdir}: "
                                                             f"{exc}"))
            continue
        report.sections.append((
            "fleetflow crash state",
            f"conductor logs, databases and host state kept in {kept}\n"
            + kept_state.summary(os.path.join(kept, "fleetflow.db"))))


@pytest.fixture
def keep_on_failure(request, tmp_path_factory):
    """``keep(cloud)``: keep ``cloud``'s directory if the test fails (returns the cloud)."""
    into = _load("kept_state").keep_dir(tmp_path_factory.getbasetemp())

    def keep(cloud):
        request.node.stash.setdefault(CLOUDS, []).append((str(cloud.workdir), into))
        return cloud

    return keep


def _load(name: str):
    """A harness module of this directory, imported under the same name the conductor
    subprocesses use (this directory on sys.path: the harnesses import each other)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    return importlib.import_module(name)


def load_takeover_module():
    """takeover_flow: the flow, its events, the TakeoverCloud harness."""
    return _load("takeover_flow")


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


@pytest.fixture
def serve_process():
    """The serve_process module (ServeProcess: a real ``fleetflow serve`` to kill)."""
    return _load("serve_process")


def load_provision_cloud_module():
    """provision_cloud (it needs forkserver)."""
    return _load("provision_cloud")


@pytest.fixture
def provision_cloud(tmp_path, keep_on_failure):
    """The real provision flow's cloud: fleet, SQL jobboards, killable conductors."""
    module = load_provision_cloud_module()
    cloud = keep_on_failure(module.ProvisionCloud(tmp_path))
    yield cloud
    cloud.close()


@pytest.fixture
def provision_cloud_factory(tmp_path, keep_on_failure):
    """``make(**kwargs)``: a ProvisionCloud of another size (closed after the test)."""
    module = load_provision_cloud_module()
    made = []

    def make(**kwargs):
        cloud = keep_on_failure(module.ProvisionCloud(tmp_path / f"cloud{len(made)}",
                                                      **kwargs))
        made.append(cloud)
        return cloud

    yield make
    for cloud in made:
        cloud.close()


@pytest.fixture
def provision_harness():
    """The provision_cloud module (CrashCase, run_crash_cases, pools)."""
    return load_provision_cloud_module()


def load_evacuation_cloud_module():
    """evacuation_cloud (it builds on provision_cloud)."""
    return _load("evacuation_cloud")


@pytest.fixture
def evacuation_harness():
    """The evacuation_cloud module (EvacuationCase, run_evacuation_cases, flow_atoms)."""
    return load_evacuation_cloud_module()


@pytest.fixture
def evacuation_cloud_factory(tmp_path, keep_on_failure):
    """``make(sources=, targets=, **kwargs)``: an EvacuationCloud (closed after the test)."""
    module = load_evacuation_cloud_module()
    made = []

    def make(**kwargs):
        cloud = keep_on_failure(module.EvacuationCloud(tmp_path / f"evacuation{len(made)}",
                                                       **kwargs))
        made.append(cloud)
        return cloud

    yield make
    for cloud in made:
        cloud.close()


def load_vcluster_cloud_module():
    """vcluster_cloud (it builds on provision_cloud)."""
    return _load("vcluster_cloud")


@pytest.fixture
def vcluster_harness():
    """The vcluster_cloud module (VClusterCloud, lanes, cluster bodies)."""
    return load_vcluster_cloud_module()


@pytest.fixture
def vcluster_cloud_factory(tmp_path, keep_on_failure):
    """``make(lanes=, **kwargs)``: a VClusterCloud (closed after the test)."""
    module = load_vcluster_cloud_module()
    made = []

    def make(**kwargs):
        cloud = keep_on_failure(module.VClusterCloud(tmp_path / f"vcluster{len(made)}",
                                                     **kwargs))
        made.append(cloud)
        return cloud

    yield make
    for cloud in made:
        cloud.close()
