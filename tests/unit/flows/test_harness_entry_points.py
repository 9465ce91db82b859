"""A package's flows, registered through the ``fleetflow.flows`` entry point group,
are found by name without the package being imported first.

The package is installed as an installer leaves it: its modules, and a
``.dist-info`` directory with its ``METADATA`` and ``entry_points.txt``, in a
directory of its own put on the path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from fleetflow.flows import registry

CANARY = '''
from taskflow.patterns import linear_flow

from fleetflow.testing import FleetTask, flow_factory, runtime

CANARY = {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}


class BootCanary(FleetTask):
    def execute(self, host, canary_uuid):
        runtime.get().compute.ensure_built(host, canary_uuid, CANARY)


@flow_factory("packaged-canary")
def canary_flow(host: str, canary_uuid: str):
    return linear_flow.Flow("packaged-canary").add(
        BootCanary("boot-canary", inject={"host": host, "canary_uuid": canary_uuid}))
'''

USER_TEST = '''
import sys
import uuid


def test_the_packaged_flow_runs_by_its_name_alone(fleetflow_cloud):
    assert "canaryflows" not in sys.modules
    job = {"flow": "packaged-canary",
           "kwargs": {"host": "z1-r1-h01", "canary_uuid": str(uuid.uuid4())}}
    assert fleetflow_cloud.run(job) == "SUCCESS"
    assert "canaryflows.canary" in sys.modules
    guest = fleetflow_cloud.runtime.compute.get_instance("z1-r1-h01", job["kwargs"]["canary_uuid"])
    assert guest["state"] == "ACTIVE"
'''


def install(site, distribution: str, modules: dict[str, str], entry_points: dict[str, str]):
    """Lay ``distribution`` out in ``site`` as pip would: its modules and its dist-info."""
    for path, body in modules.items():
        target = site / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(body))
    info = site / f"{distribution}-1.0.dist-info"
    info.mkdir(parents=True)
    info.joinpath("METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    info.joinpath("entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\n"
        + "".join(f"{name} = {value}\n" for name, value in entry_points.items()))


@pytest.mark.slow  # a fresh interpreter
def test_a_packages_flow_runs_on_the_harness_by_name(tmp_path):
    site = tmp_path / "site"
    install(site, "canaryflows", {"canaryflows/__init__.py": "", "canaryflows/canary.py": CANARY},
            {"canary": "canaryflows.canary"})
    tests = tmp_path / "tests"
    tests.mkdir()
    tests.joinpath("test_packaged.py").write_text(USER_TEST)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": path})
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert re.search(r"\b1 passed\b", report), report


@pytest.fixture
def fresh_registry(monkeypatch, tmp_path):
    """The registry as a new process has it, with ``tmp_path/site`` on the path."""
    monkeypatch.setattr(registry, "_factories", dict(registry._factories))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(registry, "_broken", [])
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    return site


def test_an_entry_point_may_name_a_function_that_registers_flows(fresh_registry):
    install(fresh_registry, "registering", {"registering_flows.py": '''
        from taskflow.patterns import linear_flow

        from fleetflow.testing import flow_factory


        def registered_flow():
            return linear_flow.Flow("registered")


        def register():
            flow_factory("registered-by-call")(registered_flow)
        '''}, {"all": "registering_flows:register"})
    assert registry.build("registered-by-call").name == "registered"


def test_a_broken_entry_point_is_named_when_a_flow_is_not_found(fresh_registry):
    install(fresh_registry, "brokenflows", {"brokenflows.py": "raise ImportError('no gpu')\n"},
            {"gpu": "brokenflows"})
    install(fresh_registry, "goodflows", {"goodflows.py": '''
        from taskflow.patterns import linear_flow

        from fleetflow.testing import flow_factory


        @flow_factory("good-flow")
        def good_flow():
            return linear_flow.Flow("good")
        '''}, {"good": "goodflows"})
    assert registry.build("good-flow").name == "good"
    with pytest.raises(registry.FlowEntryPointError,
                       match=r"unknown flow 'gpu-flow'.*'gpu' \(brokenflows\) of group "
                             r"'fleetflow.flows' failed: ImportError: no gpu"):
        registry.get("gpu-flow")
    # Loaded once: a second miss reports the same entry point, without importing again.
    with pytest.raises(registry.FlowEntryPointError, match="'gpu'"):
        registry.get("gpu-flow")
    assert registry._broken == [registry._broken[0]]
