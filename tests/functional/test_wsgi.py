"""``fleetflow.api.wsgi:application``: the API as a WSGI app for gunicorn, uwsgi, mod_wsgi.

The app reads its configuration file from ``FLEETFLOW_CONFIG``, builds itself
in the worker process on the first request and runs no conductor: a
reservation posted through it waits on the jobboard until a ``fleetflow
conductor`` process runs it. The last test serves it with a real gunicorn
beside a conductor process, on one SQLite database and its SQL jobboard.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import requests
import yaml
from werkzeug.test import Client

from fleetflow.api import wsgi

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
TENANT = {"X-Project-Id": "demo", "X-Roles": "member"}

FLEET = {
    "profiles": {"small": {"inventory": {
        "VCPU": {"total": 16, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 32768, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 400, "allocation_ratio": 1.0}}}},
    "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
        {"name": "r1", "hosts": 3, "profile": "small"}]}]}],
    "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}],
    "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
}

RESERVATION = {"reservation": {"name": "wsgi", "count": 2, "flavor_ref": "m1.small",
                               "image_ref": "cirros"}}


def write_config(tmp_path) -> str:
    """A configuration file of a cloud on one SQLite database, schema and fleet loaded."""
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(FLEET))
    path = tmp_path / "fleetflow.conf"
    path.write_text(f"""[DEFAULT]
state_dir = {tmp_path}

[database]
connection = sqlite:///{tmp_path}/cloud.db

[api]
policy_file = {tmp_path}/policy.yaml

[fleet]
file = {fleet_file}

[jobboard]
backend = sql
""")
    env = clean_environ(FLEETFLOW_CONFIG=str(path))
    for args in (["db", "upgrade"], ["fleet", "load", str(fleet_file)]):
        subprocess.run([sys.executable, "-m", "fleetflow.cli.main", "--config-file", str(path),
                        *args], env=env, cwd=tmp_path, check=True, capture_output=True,
                       timeout=300)
    return str(path)


def clean_environ(**settings) -> dict:
    """This process's environment without FLEETFLOW_* settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFLOW_")}
    env.update(settings)
    return env


def test_config_files_come_from_the_environment_variable():
    assert wsgi.config_files({"FLEETFLOW_CONFIG": "a.conf, b.conf"}) == ["a.conf", "b.conf"]
    assert isinstance(wsgi.application, wsgi.LazyApplication)


def test_the_wsgi_app_serves_requests_and_leaves_flows_to_conductors(tmp_path):
    from fleetflow.common import config
    from fleetflow.engine.backend import get_backend
    from fleetflow.engine.jobboard.boards import make_jobboard

    path = write_config(tmp_path)
    app = wsgi.LazyApplication(clean_environ(FLEETFLOW_CONFIG=path))
    client = Client(app)

    assert client.get("/openapi.json").status_code == 200
    hosts = client.get("/v2/admin/hosts", headers=ADMIN).get_json()["hosts"]
    assert len(hosts) == 3
    answer = client.post("/v2/demo/reservations", headers=TENANT, json=RESERVATION)
    assert answer.status_code == 202, answer.get_data(as_text=True)
    location = answer.headers["Location"].replace("http://localhost", "")
    reservation = client.get(location, headers=TENANT).get_json()["reservation"]
    assert reservation["status"] == "PENDING"
    # Built once for this process: the second request used the same app.
    assert app.load() is app.load()

    # The job waits on the board, unclaimed: this process runs no conductor.
    conf = config.load(config_files=[path], environ={})
    board = make_jobboard(conf, get_backend(conf))
    try:
        jobs = {job.name: board.find_owner(job)
                for job in board.iterjobs(only_unclaimed=False, ensure_fresh=True)}
    finally:
        board.close()
    assert jobs == {reservation["flow_id"]: None}


def test_the_wsgi_app_refuses_a_database_without_its_schema(tmp_path):
    path = tmp_path / "fleetflow.conf"
    path.write_text(f"[database]\nconnection = sqlite:///{tmp_path}/empty.db\n")
    app = wsgi.LazyApplication(clean_environ(FLEETFLOW_CONFIG=str(path)))
    with pytest.raises(RuntimeError, match="fleetflow db upgrade"):
        app.load()


def _start(tmp_path, name: str, args: list[str], env: dict) -> subprocess.Popen:
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(args, env=env, cwd=tmp_path, stdout=log,
                            stderr=subprocess.STDOUT)


def _log(tmp_path, name: str) -> str:
    return (tmp_path / f"{name}.log").read_text()[-3000:]


def _wait_for_gunicorn(url: str, proc: subprocess.Popen, log) -> None:
    # Each worker builds its app on its first request, which takes seconds.
    deadline = time.monotonic() + 120
    while True:
        try:
            requests.get(f"{url}/openapi.json", timeout=60).raise_for_status()
            return
        except requests.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{url} never answered: {log()}", pytrace=False)
            time.sleep(0.2)


@pytest.mark.slow
def test_gunicorn_serves_the_api_and_a_conductor_process_runs_the_flow(tmp_path, free_port):
    path = write_config(tmp_path)
    env = clean_environ(FLEETFLOW_CONFIG=path)
    procs = {
        "conductor": _start(tmp_path, "conductor", [
            sys.executable, "-m", "fleetflow.cli.main", "--config-file", path,
            "conductor", "--name", "c1"], env),
        "gunicorn": _start(tmp_path, "gunicorn", [
            sys.executable, "-m", "gunicorn", "--workers", "2", "--threads", "4",
            "--bind", f"127.0.0.1:{free_port}", "--graceful-timeout", "10",
            "fleetflow.api.wsgi:application"], env),
    }
    url = f"http://127.0.0.1:{free_port}"
    try:
        _wait_for_gunicorn(url, procs["gunicorn"], lambda: _log(tmp_path, "gunicorn"))
        answer = requests.post(f"{url}/v2/demo/reservations", headers=TENANT,
                               json=RESERVATION, timeout=60)
        assert answer.status_code == 202, answer.text
        location = answer.headers["Location"]
        deadline = time.monotonic() + 180
        while True:
            body = requests.get(location, headers=TENANT, timeout=30).json()["reservation"]
            if body["status"] not in ("PENDING", "SCHEDULING", "BUILDING", "REVERTING"):
                break
            assert time.monotonic() < deadline, (body, _log(tmp_path, "conductor"))
            time.sleep(0.2)
        assert body["status"] == "ACTIVE", (body, _log(tmp_path, "conductor"))
        assert body["progress"]["active"] == 2
        assert "conductor c1" in _log(tmp_path, "conductor")
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
