"""Every shell block of the README, run as pasted against a served cloud.

One real ``fleetflow serve`` runs in a temporary directory on a free port; each
``sh`` block of README.md runs in order in bash (``set -e -o pipefail``) in that
directory, with the README's ``127.0.0.1:8774`` replaced by the server's
address and the CLI pointed at it through the environment (``FLEETFLOW_API_PORT``,
the same variable the server reads). ``curl`` fails on an error status there, so a
4xx is a failed block, not a printed error body. Blocks that cannot run here are
listed in EXCLUDED, each with its reason; every other block must exit 0, and some
must also print what the README says they print (EXPECTED).
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import pick_free_port, stop_server

# A real server, and every block of the README run against it.
pytestmark = pytest.mark.slow

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
README_ADDRESS = "127.0.0.1:8774"

# Blocks left out, each found by a line it holds, and why.
EXCLUDED = {
    # Installs into a new virtualenv, then starts a server in the foreground.
    "pip install -e . && fleetflow serve": "installs the package and starts a server",
    # Installs the test extras and runs the whole test suite, this test included.
    "pip install -e '.[test]' && pytest": "installs the package and runs every test",
    # Runs the test suite's fast loop.
    'pytest -n 3 -m "not slow"': "runs the tests",
    # Needs PostgreSQL, Redis and RabbitMQ and starts conductors, agents and a server.
    "fleetflow --config-file dist.conf db upgrade": "distributed mode: external services "
                                                    "and long-running servers",
    # Installs Nova and its harness's packages.
    "pip install -e '.[openstack]'": "installs the openstack extra",
    # Starts a real Nova: tests/openstack/test_readme.py runs it.
    "fleetflow.testing.openstack_cloud --hosts": "runs against a real Nova, in the openstack "
                                                  "layer",
    # Talks to that distributed deployment, from a second shell.
    "dist.conf audit --mode direct": "distributed mode: needs the servers started above",
}

# What a block must print besides exiting 0, found by a line the block holds.
EXPECTED = {
    "fleetflow $A audit": ["0 mismatches"],
    "fleetflow audit --mode api": ["0 mismatches"],
    "--dry-run || echo": ["exit 3: does not fit"],
    # The reservation stops PAUSED for the operator, who then reverts its flow.
    "--on-error pause --json": ["PAUSED", "REVERTED"],
    # The openstack plugin: a member's help has no operator command; --wait ends ACTIVE.
    "openstack fleet reservation create osc-web": ["fleet reservation create", "ACTIVE"],
}

# Each block gets this much time; the slowest (evacuations) takes a few seconds.
BLOCK_TIMEOUT = 300
STARTUP_TIMEOUT = 120

PRELUDE = """set -e -o pipefail
# An error status fails the command (and the block), printing the error body.
curl() { command curl --fail-with-body "$@"; }
"""


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


def _excluded(block: str) -> str | None:
    return next((why for marker, why in EXCLUDED.items() if marker in block), None)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    """``(environment, directory)`` of a served cloud: ``fleetflow serve`` on a free port."""
    if shutil.which("curl") is None:
        pytest.fail("the README's examples need curl")
    directory = tmp_path_factory.mktemp("readme")
    port = pick_free_port()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("FLEETFLOW_")}
    env.update({
        "FLEETFLOW_API_PORT": str(port),
        # The README's blocks run in order, as a reader pastes them; nothing waits on
        # simulated time.
        "FLEETFLOW_COMPUTE_BOOT_SECONDS": "0",
        "FLEETFLOW_COMPUTE_MIGRATE_SECONDS": "0",
        "FLEETFLOW_COMPUTE_LIVE_MIGRATE_SECONDS": "0",
        # The fleetflow and python3 of this interpreter come first.
        "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), env["PATH"]]),
        "COLUMNS": "160",
    })
    log = (directory / "serve.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "fleetflow.cli.main", "serve"],
                              cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_until_served(server, port, directory)
        yield env, directory, port
    finally:
        stop_server(server)
        log.close()


def _wait_until_served(server: subprocess.Popen, port: int, directory: pathlib.Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"fleetflow serve exited {server.returncode}:\n"
                        + (directory / "serve.log").read_text(errors="replace"))
        try:
            requests.get(f"http://127.0.0.1:{port}/openapi.json", timeout=5)
            return
        except requests.ConnectionError:
            time.sleep(0.25)
    pytest.fail("fleetflow serve did not answer within "
                f"{STARTUP_TIMEOUT} s:\n" + (directory / "serve.log").read_text(errors="replace"))


BLOCKS = sh_blocks(README.read_text(encoding="utf-8"))
RUN = [block for block in BLOCKS if _excluded(block) is None]


def test_the_exclusions_match_blocks_of_the_readme():
    for marker in [*EXCLUDED, *EXPECTED]:
        assert sum(marker in block for block in BLOCKS) == 1, marker
    assert len(RUN) == len(BLOCKS) - len(EXCLUDED)


def test_a_server_in_the_foreground_ends_its_block():
    # A reader pasting a block would never reach a command after it.
    for block in BLOCKS:
        commands = [line.split("#")[0].strip() for line in block.splitlines()]
        commands = [c for c in commands if c]
        for index, command in enumerate(commands):
            if re.search(r"\bfleetflow\b.* (serve|conductor|compute-agent)\b", command) \
                    and not command.endswith("&"):
                assert index == len(commands) - 1, f"{command!r} is not last in:\n{block}"


def test_the_distributed_database_is_made_before_its_tables():
    (block,) = [b for b in BLOCKS if "dist.conf db upgrade" in b]
    assert block.index("createdb") < block.index("db upgrade")


def test_readme_blocks_in_order(cloud):
    """Every block, one after the other on one server: a block may use what an earlier
    one made (the group "db"), so they are one test, whatever runs the tests in parallel."""
    env, directory, port = cloud
    for block in RUN:
        script = PRELUDE + block.replace(README_ADDRESS, f"127.0.0.1:{port}")
        result = subprocess.run(["bash", "-c", script], cwd=directory, env=env,
                                capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
        output = result.stdout + result.stderr
        assert result.returncode == 0, \
            f"block exited {result.returncode}:\n{block}\n---\n{output}"
        for marker, texts in EXPECTED.items():
            if marker in block:
                for text in texts:
                    assert text in output, f"{text!r} not printed by:\n{block}\n---\n{output}"
