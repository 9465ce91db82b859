"""``fleetflow serve`` keeps its own threads on one CPU and its agent processes on all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs sched_setaffinity and at least two CPUs to choose from")]

FLEETFLOW = os.path.join(os.path.dirname(sys.executable), "fleetflow")


def _serve(tmp_path, port, wait_for_api, **env_extra) -> tuple[subprocess.Popen, str]:
    fleet = tmp_path / "fleet.yaml"
    subprocess.run([FLEETFLOW, "fleet", "generate", "--hosts", "4", "-o", str(fleet)],
                   check=True, capture_output=True)
    env = dict(os.environ, FLEETFLOW_API_PORT=str(port), FLEETFLOW_FLEET_FILE=str(fleet),
               FLEETFLOW_STATE_DIR=str(tmp_path),
               FLEETFLOW_DATABASE_CONNECTION=f"sqlite:///{tmp_path}/fleetflow.db", **env_extra)
    proc = subprocess.Popen([FLEETFLOW, "serve"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_api(url, alive=lambda: proc.poll() is None,
                     on_timeout=lambda: "fleetflow serve did not start")
    except BaseException:
        proc.kill()
        raise
    return proc, url


def _affinities(pid: int) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """CPUs of every thread of ``pid``, and of its children's main threads."""
    threads = {int(tid): sorted(os.sched_getaffinity(int(tid)))
               for tid in os.listdir(f"/proc/{pid}/task")}
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = {int(c): sorted(os.sched_getaffinity(int(c))) for c in f.read().split()}
    return threads, children


@pytest.mark.parametrize("setting", ["true", "false"])
def test_serve_threads_share_one_cpu_and_agents_keep_every_cpu(tmp_path, setting, free_port,
                                                               wait_for_api):
    allowed = sorted(os.sched_getaffinity(0))
    proc, url = _serve(tmp_path, free_port, wait_for_api, FLEETFLOW_SERVE_ON_ONE_CPU=setting)
    try:
        # A reservation, so the conductors' and the engine's threads exist too.
        answer = requests.post(f"{url}/v2/demo/reservations",
                               headers={"X-Project-Id": "demo", "X-Roles": "member"},
                               json={"reservation": {"name": "r", "count": 2,
                                                     "flavor_ref": "m1.tiny",
                                                     "image_ref": "cirros"}}, timeout=30)
        assert answer.status_code == 202, answer.text
        threads, agents = _affinities(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    assert len(threads) > 3 and len(agents) == 2
    cpus = {tuple(c) for c in threads.values()}
    if setting == "true":
        assert len(cpus) == 1 and len(next(iter(cpus))) == 1, threads
        assert next(iter(cpus))[0] in allowed
    else:
        assert cpus == {tuple(allowed)}, threads
    assert all(c == allowed for c in agents.values()), agents
