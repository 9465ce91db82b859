"""A real Nova and Placement for the tests of this layer: the ``openstack_cloud`` fixture.

One harness per session (``python -m fleetflow.testing.openstack_cloud``, Nova's own
functional harness in a process of its own: Nova is never imported here), with 10 compute
hosts ``host000``..``host009``. Without Nova installed its tests are skipped, or fail
under FLEETFLOW_REQUIRE_SERVICES=1, as the tests of the real servers do.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import subprocess
import sys
import threading
import time
import warnings

import pytest
import requests

from tests.conftest import skip_or_fail, stop_server
from tests.openstack import checks

HOSTS = 10
CLOUD_NAME = "harness"
#: Seconds the harness may take to print READY (about 5 s with 10 hosts on an idle
#: 2-core machine; a loaded one running the suite beside it is much slower).
READY_SECONDS = 240
#: The harness's exit status when Nova's harness cannot be imported.
EXIT_NO_NOVA = 3
#: Seconds a test's clean-up waits for Nova to delete its servers. A delete takes a
#: moment on an idle machine; a loaded one (the harness beside the rest of the suite)
#: once took over a minute. A server still being deleted after that is left out of
#: what the next tests count (``checks.fleetflow_servers``).
DELETE_SECONDS = 300


class OpenStackCloud:
    """A started harness: where it serves, its clouds.yaml, and its hosts' switches."""

    def __init__(self, process, directory, compute_url, placement_url, log_path):
        self.process = process
        self.directory = directory
        self.clouds_yaml = os.path.join(directory, "clouds.yaml")
        self.cloud_name = CLOUD_NAME
        self.compute_url = compute_url
        self.placement_url = placement_url
        self.log_path = log_path
        self.host_names = [f"host{index:03d}" for index in range(HOSTS)]

    def connection(self):
        """A stock openstacksdk connection to the harness, from its clouds.yaml."""
        from openstack import config, connection

        cloud_config = config.OpenStackConfig(config_files=[self.clouds_yaml])
        return connection.Connection(config=cloud_config.get_one(self.cloud_name))

    def stop_host(self, name: str) -> dict:
        """Stop ``name``'s nova-compute (no RPC, no heartbeat): os-services reads it down."""
        return self._control("POST", f"hosts/{name}/stop")

    def start_host(self, name: str) -> dict:
        """Start ``name``'s nova-compute again, as a restart does; its servers are kept."""
        return self._control("POST", f"hosts/{name}/start")

    def hosts(self) -> dict:
        """``{host: "up" | "stopped"}``: what the harness did, not what Nova reports."""
        return self._control("GET", "hosts")

    def wait_for_service_state(self, conn, host: str, state: str, timeout: float = 90) -> None:
        """Wait until os-services reports ``host``'s nova-compute ``state`` (up or down)."""
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            seen = {service.host: service.state
                    for service in conn.compute.services(binary="nova-compute")}.get(host)
            if seen == state:
                return
            time.sleep(0.25)
        raise AssertionError(f"{host} is still {seen!r}, not {state!r}, after {timeout} s")

    def _control(self, method, route):
        answer = requests.request(method, f"{self.compute_url}/_harness/{route}", timeout=120)
        answer.raise_for_status()
        return answer.json()

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                return "".join(log.readlines()[-lines:])
        except OSError:
            return ""


def _read_lines(stream, lines: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        lines.put(line)
    lines.put(None)


def _start_harness(directory) -> OpenStackCloud:
    log_path = os.path.join(directory, "harness.log")
    command = [sys.executable, "-m", "fleetflow.testing.openstack_cloud", "--hosts", str(HOSTS),
               "--clouds-yaml", os.path.join(directory, "clouds.yaml"),
               "--cloud-name", CLOUD_NAME, "--log-file", log_path]
    # Nova's fixtures keep their SQLite files under TMPDIR: in the session's directory,
    # they go with it even when the harness is killed before its clean-up.
    environment = dict(os.environ, TMPDIR=directory)
    with open(os.path.join(directory, "harness.stderr"), "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr,
                                   stdin=subprocess.DEVNULL, text=True, cwd=directory,
                                   env=environment)
    cloud = OpenStackCloud(process, directory, None, None, log_path)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
    deadline = time.monotonic() + READY_SECONDS
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            _stop_harness(process)
            pytest.fail(f"the OpenStack harness was not ready after {READY_SECONDS} s:\n"
                        + cloud.log_tail(), pytrace=False)
        if line is None:
            status = process.wait()
            if status == EXIT_NO_NOVA:
                reason = cloud.log_tail(1).strip().rpartition("cannot be imported: ")[2]
                skip_or_fail(f"Nova's functional harness cannot be imported: {reason}")
            pytest.fail(f"the OpenStack harness exited ({status}) before it was ready:\n"
                        + cloud.log_tail(), pytrace=False)
        if line.startswith("READY "):
            _, cloud.compute_url, cloud.placement_url = line.split()
            return cloud


def _stop_harness(process) -> None:
    if process.poll() is None:
        stop_server(process)


@pytest.fixture(scope="session")
def openstack_cloud(tmp_path_factory):
    """The session's real Nova and Placement (see :class:`OpenStackCloud`)."""
    for module, what in (("nova", "Nova"), ("openstack", "openstacksdk")):
        if importlib.util.find_spec(module) is None:
            skip_or_fail(f"{what} is not installed (pip install fleetflow[openstack])")
    cloud = _start_harness(str(tmp_path_factory.mktemp("openstack_cloud")))
    try:
        yield cloud
    finally:
        _stop_harness(cloud.process)


@pytest.fixture(autouse=True)
def _clean_openstack_cloud(request):
    """After a test that used the harness: its hosts started, its servers deleted.

    The harness is shared by the whole session (each start builds Nova's databases and
    services anew), so a test that failed half way must not hand the next one a stopped
    host or servers that fill a host; each test starts from an empty cloud, all hosts up.
    A server a previous test left that Nova is still deleting when a test starts is not
    that test's: ``checks.fleetflow_servers`` leaves it out.
    """
    uses_cloud = "openstack_cloud" in request.fixturenames
    if uses_cloud:
        conn = request.getfixturevalue("openstack_cloud").connection()
        checks.ignore_servers(server.id for server in conn.compute.servers(all_projects=True))
    yield
    if not uses_cloud:
        return
    checks.ignore_servers(())
    cloud = request.getfixturevalue("openstack_cloud")
    for host, state in cloud.hosts().items():
        if state == "stopped":
            cloud.start_host(host)
    conn = cloud.connection()
    for server in conn.compute.servers(all_projects=True):
        conn.compute.delete_server(server, ignore_missing=True)
    left = _wait_for_no_servers(conn, DELETE_SECONDS)
    if left:
        warnings.warn(f"Nova has not deleted {len(left)} servers after {DELETE_SECONDS} s: "
                      f"{left}", stacklevel=1)
    # What fleetflow's evacuations and the tests change in Nova: services disabled or
    # forced down, server groups, aggregates.
    for service in conn.compute.services(binary="nova-compute"):
        if service.is_forced_down:
            conn.compute.update_service_forced_down(service, forced=False)
        if service.status != "enabled":
            conn.compute.enable_service(service)
    for group in conn.compute.server_groups(all_projects=True):
        conn.compute.delete_server_group(group, ignore_missing=True)
    for aggregate in conn.compute.aggregates():
        for host in aggregate.hosts or ():
            conn.compute.remove_host_from_aggregate(aggregate, host)
        conn.compute.delete_aggregate(aggregate, ignore_missing=True)


def _wait_for_no_servers(conn, timeout: float) -> dict:
    """Wait until Nova lists no server; returns ``{id: (status, task_state)}`` of those left."""
    deadline = time.monotonic() + timeout
    while True:
        left = {server.id: (server.status, server.task_state)
                for server in conn.compute.servers(all_projects=True)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.fixture
def fleetflow_on(openstack_cloud, tmp_path, wait_for_api):
    """``start(**settings)``: a ``fleetflow serve`` in openstack mode on the harness
    (tests/openstack/serve.py), stopped after the test."""
    from tests.conftest import pick_free_port
    from tests.openstack.serve import OpenStackServe

    started = []

    def start(**settings):
        serve = OpenStackServe(tmp_path / f"serve{len(started)}", pick_free_port(),
                               wait_for_api, openstack_cloud, **settings)
        os.makedirs(serve.workdir, exist_ok=True)
        started.append(serve)
        return serve.start()

    yield start
    for serve in started:
        serve.stop()
