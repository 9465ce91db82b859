"""``placement_url``: /placement of a live ``fleetflow serve`` for Placement's own suite.

One server for the whole layer, in a temporary directory on a free port, with a
one-host fleet and no simulated hosts. Placement's suite starts from an empty
database, so the fleet's host row is removed once the server is up (the API
refuses to delete a fleet host's provider); each suite fixture then empties
placement over HTTP, its provider included, so nothing else writes to placement.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import requests
import sqlalchemy as sa

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


@pytest.fixture(scope="session")
def placement_url(tmp_path_factory):
    directory = tmp_path_factory.mktemp("conformance")
    (directory / "fleet.yaml").write_text(FLEET)
    port = pick_free_port()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("FLEETFLOW_")}
    database = f"sqlite:///{directory / 'conformance.db'}"
    env.update({"FLEETFLOW_API_PORT": str(port),
                "FLEETFLOW_DATABASE_CONNECTION": database,
                "FLEETFLOW_FLEET_FILE": str(directory / "fleet.yaml"),
                "FLEETFLOW_COMPUTE_SIMULATE": "false",
                "FLEETFLOW_CONDUCTOR_RECONCILE_INTERVAL": "0"})
    log_path = directory / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "fleetflow.cli.main", "serve"],
                                  cwd=directory, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
        try:
            _wait_until_served(server, port, log_path)
            _forget_the_fleet_hosts(database)
            yield f"http://127.0.0.1:{port}/placement"
        finally:
            stop_server(server)


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
    """``{yaml file: {test name: (outcome, detail)}}`` of this run, summed up at its end."""
    return request.config.stash.setdefault(TALLY, {})


def pytest_terminal_summary(terminalreporter, config):
    tally = config.stash.get(TALLY, {})
    if not tally:
        return
    outcomes = [state for tests in tally.values() for state, _why in tests.values()]
    ran = [state for state in outcomes if state != "skip"]
    terminalreporter.write_line(
        f"Placement conformance: {ran.count('pass')} of {len(ran)} tests pass "
        f"in {len(tally)} files ({outcomes.count('skip')} skipped by the suite itself)")
