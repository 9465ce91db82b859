"""``placement_urls``: /placement of live ``fleetflow serve`` processes for Placement's suite.

Placement's fixtures configure Placement's process; here each configuration a
fixture implies is a server configured that way (:data:`SERVERS`), and each
YAML file runs on the server of its fixture (test_placement_suite.py). The
servers start together, once per test process, each in its own temporary
directory on a free port, with a one-host fleet and no simulated hosts.
Placement's suite starts from an empty database, so the fleet's host row is
removed once a server is up (the API refuses to delete a fleet host's
provider); each suite fixture then empties placement over HTTP, its provider
included, so nothing else writes to placement.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import requests
import sqlalchemy as sa
import yaml
from placement import policies as placement_policies

from tests.conftest import pick_free_port, stop_server

STARTUP_TIMEOUT = 120
# The smallest fleet `fleetflow serve` accepts; its host goes at start, its provider
# before the first file.
FLEET = """\
profiles:
  p: {inventory: {VCPU: {total: 1}, MEMORY_MB: {total: 1}, DISK_GB: {total: 1}}}
regions:
  - name: conformance
    zones:
      - name: z
        racks:
          - {name: r, hosts: 1, profile: p}
"""
# Placement's APIFixture runs with [oslo_policy] enforce_new_defaults = False unless
# the file's fixture says otherwise (SecureRBACPolicyFixture).
_LEGACY = {"FLEETFLOW_OSLO_POLICY_ENFORCE_NEW_DEFAULTS": "false"}
# Every server's configuration, by name: its FLEETFLOW_* variables, and whether it
# reads the policy file of OpenPolicyFixture (every Placement rule but admin_api "@").
SERVERS = {
    # APIFixture and every fixture built on it, LegacyRBACPolicyFixture included.
    "legacy": (_LEGACY, False),
    # SecureRBACPolicyFixture: Placement's new defaults.
    "secure": ({"FLEETFLOW_OSLO_POLICY_ENFORCE_NEW_DEFAULTS": "true"}, False),
    # OpenPolicyFixture's open policy, and CORSFixture's [cors] options: CORS only adds
    # headers to a request with an Origin, which no *-policy file sends, and
    # cors.yaml reads only version discovery, which needs no policy.
    "open": (dict(_LEGACY, FLEETFLOW_CORS_ALLOWED_ORIGIN="http://valid.example.com",
                  FLEETFLOW_CORS_ALLOW_HEADERS="openstack-api-version"), True),
    # An empty database for a file that needs one (test_placement_suite.FRESH).
    "fresh": (_LEGACY, False),
}


def open_policy() -> dict[str, str]:
    """What OpenPolicyFixture sets: every rule Placement registers but admin_api, "@"."""
    return {rule.name: "@" for rule in placement_policies.list_rules()
            if rule.name != "admin_api"}


@pytest.fixture(scope="session")
def placement_urls(tmp_path_factory):
    """``{server name: /placement URL}`` of every server of :data:`SERVERS`."""
    started = []
    try:
        for name, (variables, open_policy_file) in SERVERS.items():
            started.append(_start(tmp_path_factory.mktemp(f"conformance-{name}"), variables,
                                  open_policy_file))
        urls = {}
        for name, (server, port, log_path, database) in zip(SERVERS, started, strict=True):
            _wait_until_served(server, port, log_path)
            _forget_the_fleet_hosts(database)
            urls[name] = f"http://127.0.0.1:{port}/placement"
        yield urls
    finally:
        for server, *_rest in started:
            stop_server(server)


def _start(directory, variables: dict, open_policy_file: bool):
    (directory / "fleet.yaml").write_text(FLEET)
    port = pick_free_port()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("FLEETFLOW_")}
    database = f"sqlite:///{directory / 'conformance.db'}"
    env.update({"FLEETFLOW_API_PORT": str(port),
                "FLEETFLOW_DATABASE_CONNECTION": database,
                "FLEETFLOW_FLEET_FILE": str(directory / "fleet.yaml"),
                "FLEETFLOW_COMPUTE_SIMULATE": "false",
                # /placement needs no conductor.
                "FLEETFLOW_CONDUCTOR_WORKERS": "0",
                "FLEETFLOW_CONDUCTOR_RECONCILE_INTERVAL": "0"}, **variables)
    if open_policy_file:
        # Relative, in the working directory: found as a deployment's would be.
        (directory / "policy.yaml").write_text(yaml.safe_dump(open_policy()))
    log_path = directory / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "fleetflow.cli.main", "serve"],
                                  cwd=directory, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    return server, port, log_path, database


def _forget_the_fleet_hosts(database: str) -> None:
    engine = sa.create_engine(database)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("DELETE FROM hosts"))
    finally:
        engine.dispose()


def _wait_until_served(server, port, log_path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"fleetflow serve exited {server.returncode}:\n"
                        + log_path.read_text(errors="replace"))
        try:
            requests.get(f"http://127.0.0.1:{port}/openapi.json", timeout=5)
            return
        except requests.ConnectionError:
            time.sleep(0.1)
    pytest.fail(f"fleetflow serve did not answer within {STARTUP_TIMEOUT} s:\n"
                + log_path.read_text(errors="replace"))


TALLY = pytest.StashKey[dict]()


@pytest.fixture
def conformance_tally(request) -> dict:
    """``{yaml file: [each test's outcome: pass, fail or skip]}`` of this run, summed up
    at its end."""
    return request.config.stash.setdefault(TALLY, {})


def pytest_terminal_summary(terminalreporter, config):
    tally = config.stash.get(TALLY, {})
    if not tally:
        return
    outcomes = [state for states in tally.values() for state in states]
    ran = [state for state in outcomes if state != "skip"]
    terminalreporter.write_line(
        f"Placement conformance: {ran.count('pass')} of {len(ran)} tests pass "
        f"in {len(tally)} files ({outcomes.count('skip')} skipped by the suite itself)")
