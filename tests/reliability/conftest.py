"""Fixtures of the reliability tests: a cloud whose conductors run in killable subprocesses."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


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
def provision_cloud(tmp_path):
    """The real provision flow's cloud: fleet, SQL jobboards, killable conductors."""
    module = load_provision_cloud_module()
    cloud = module.ProvisionCloud(tmp_path)
    yield cloud
    cloud.close()


@pytest.fixture
def provision_cloud_factory(tmp_path):
    """``make(**kwargs)``: a ProvisionCloud of another size (closed after the test)."""
    module = load_provision_cloud_module()
    made = []

    def make(**kwargs):
        cloud = module.ProvisionCloud(tmp_path / f"cloud{len(made)}", **kwargs)
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
def evacuation_cloud_factory(tmp_path):
    """``make(sources=, targets=, **kwargs)``: an EvacuationCloud (closed after the test)."""
    module = load_evacuation_cloud_module()
    made = []

    def make(**kwargs):
        cloud = module.EvacuationCloud(tmp_path / f"evacuation{len(made)}", **kwargs)
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
def vcluster_cloud_factory(tmp_path):
    """``make(lanes=, **kwargs)``: a VClusterCloud (closed after the test)."""
    module = load_vcluster_cloud_module()
    made = []

    def make(**kwargs):
        cloud = module.VClusterCloud(tmp_path / f"vcluster{len(made)}", **kwargs)
        made.append(cloud)
        return cloud

    yield make
    for cloud in made:
        cloud.close()
