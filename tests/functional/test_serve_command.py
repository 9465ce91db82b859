"""``fleetflow serve`` as a user runs it: a busy port, and where its files go."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import requests

FLEETFLOW = os.path.join(os.path.dirname(sys.executable), "fleetflow")
TENANT = {"X-Project-Id": "demo", "X-Roles": "member"}


def _env(**settings: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFLOW_")}
    env.update(settings)
    return env


def test_a_busy_port_is_one_clear_error_at_once(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([FLEETFLOW, "serve"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env=_env(FLEETFLOW_API_PORT=str(port)))
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    [line] = lines
    assert f"127.0.0.1:{port}" in line and "already in use" in line
    assert "[api] port" in line and "FLEETFLOW_API_PORT" in line
    assert "[api] host" in line and "FLEETFLOW_API_HOST" in line
    # Refused before anything started: no database, no agents, no files.
    assert list(tmp_path.iterdir()) == []


def test_a_host_that_would_read_down_between_heartbeats_is_refused_at_start(tmp_path):
    done = subprocess.run([FLEETFLOW, "serve"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60,
                          env=_env(FLEETFLOW_COMPUTE_SERVICE_DOWN_TIME="10",
                                   FLEETFLOW_COMPUTE_HEARTBEAT_INTERVAL="10"))
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "[compute] service_down_time" in lines[0]
    assert "[compute] heartbeat_interval" in lines[0]
    # Refused before anything started: no database, no agents, no files.
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["conductor"], ["compute-agent", "--all"]])
def test_the_other_serving_commands_refuse_it_too(tmp_path, command):
    from click.testing import CliRunner

    from fleetflow.cli.main import cli

    result = CliRunner().invoke(cli, command, env={
        "FLEETFLOW_STATE_DIR": str(tmp_path), "FLEETFLOW_COMPUTE_SERVICE_DOWN_TIME": "5",
        "FLEETFLOW_COMPUTE_HEARTBEAT_INTERVAL": "10"})
    assert result.exit_code == 1, result.output
    assert "[compute] service_down_time" in result.output
    assert "[compute] heartbeat_interval" in result.output
    assert list(tmp_path.iterdir()) == []


def test_help_names_the_state_directory_and_the_port_options():
    done = subprocess.run([FLEETFLOW, "serve", "--help"], capture_output=True, text=True,
                          timeout=60, env=_env())
    assert done.returncode == 0
    for word in ("--state-dir", "FLEETFLOW_STATE_DIR", "fleetflow-state",
                 "FLEETFLOW_API_PORT", "[api] host:port"):
        assert word in done.stdout, word


def _files(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root)
            for d, dirs, files in os.walk(root) for f in files + dirs}


@pytest.mark.slow
def test_every_file_serve_writes_is_in_the_state_directory(tmp_path, free_port, wait_for_api):
    fleet = tmp_path / "fleet.yaml"
    subprocess.run([FLEETFLOW, "fleet", "generate", "--hosts", "4", "-o", str(fleet)],
                   check=True, capture_output=True, timeout=120, env=_env())
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = _env(FLEETFLOW_API_PORT=str(free_port), FLEETFLOW_FLEET_FILE=str(fleet))
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([FLEETFLOW, "serve"], cwd=workdir, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{free_port}"
    try:
        wait_for_api(url, alive=lambda: proc.poll() is None,
                     on_timeout=lambda: (tmp_path / "serve.log").read_text())
        # A reservation, so conductors, engines and agents write what they write.
        answer = requests.post(f"{url}/v2/demo/reservations", headers=TENANT, timeout=30,
                               json={"reservation": {"name": "r", "count": 2,
                                                     "flavor_ref": "m1.tiny",
                                                     "image_ref": "cirros"}})
        assert answer.status_code == 202, answer.text
        running = _files(workdir)
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    assert proc.returncode == 0, (tmp_path / "serve.log").read_text()
    top = {path.split(os.sep)[0] for path in running}
    assert top == {"fleetflow-state"}, running
    inside = {path.split(os.sep, 1)[1] for path in running if os.sep in path}
    assert {"fleetflow.db", "fleetflow-hosts.db", "rpc", "conductors"} <= inside, inside
    # A clean stop leaves no liveness record behind.
    assert not os.listdir(workdir / "fleetflow-state" / "conductors")

