"""Distributed mode end to end: every part a separate process on the real servers.

PostgreSQL holds the state, Redis the jobboard, RabbitMQ carries compute RPC:
``fleetflow serve`` (API only), two ``fleetflow conductor`` processes and one
``fleetflow compute-agent --all``. A 50-instance reservation is posted over
HTTP; once it is under way the conductor holding its job is killed with
SIGKILL, and the other one must finish it: ACTIVE, one spawn per instance,
and a clean audit.
"""

from __future__ import annotations

import signal
import time

import pytest
import requests
from distributed_cloud import ADMIN, TENANT
from distributed_cloud import board as _board
from distributed_cloud import owner as _owner

FLEET = {
    "profiles": {"small": {"inventory": {
        "VCPU": {"total": 16, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 32768, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 400, "allocation_ratio": 1.0}}}},
    "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
        {"name": "r1", "hosts": 5, "profile": "small"},
        {"name": "r2", "hosts": 5, "profile": "small"}]}]}],
    "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}],
    "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
}


@pytest.fixture
def distributed(distributed_cloud):
    return distributed_cloud(FLEET, FLEETFLOW_COMPUTE_BOOT_SECONDS="1.0",
                             # Few engine threads and a slow boot: the flow lasts long enough
                             # (about 50 / 4 x 1 s) for the test to kill its conductor mid-way.
                             FLEETFLOW_CONDUCTOR_ENGINE_WORKERS="4")


def test_fifty_instances_survive_the_death_of_their_conductor(distributed):
    procs = distributed
    board = _board(procs.env)
    answer = requests.post(f"{procs.url}/v2/demo/reservations", headers=TENANT, json={
        "reservation": {"name": "dist", "count": 50, "flavor_ref": "m1.small",
                        "image_ref": "cirros"}}, timeout=60)
    assert answer.status_code == 202, answer.text
    location = answer.headers["Location"]
    flow_id = requests.get(location, headers=TENANT).json()["reservation"]["flow_id"]

    # Wait until the flow is under way (some instances ACTIVE, not all).
    deadline = time.monotonic() + 300
    while True:
        body = requests.get(location, headers=TENANT, timeout=30).json()["reservation"]
        if body["progress"]["active"] >= 5:
            break
        assert time.monotonic() < deadline, (body, procs.log("c1"), procs.log("c2"))
        time.sleep(0.1)
    assert body["progress"]["active"] < 50, "the reservation finished before the kill"
    owner = _owner(board, flow_id)
    assert owner, f"no owner of job {flow_id}"
    victim = next(name for name in ("c1", "c2") if owner.startswith(name))
    survivor = "c2" if victim == "c1" else "c1"
    procs.procs[victim].send_signal(signal.SIGKILL)
    assert procs.procs[victim].wait(30) == -signal.SIGKILL

    deadline = time.monotonic() + 600
    while True:
        body = requests.get(location, headers=TENANT, timeout=30).json()["reservation"]
        if body["status"] not in ("PENDING", "SCHEDULING", "BUILDING", "REVERTING"):
            break
        assert time.monotonic() < deadline, (body["progress"], procs.log(survivor))
        time.sleep(0.5)
    assert body["status"] == "ACTIVE", (body["status"], body["fault"], procs.log(survivor))
    assert procs.procs[survivor].poll() is None
    # The last task wrote ACTIVE; the conductor then consumes the job.
    deadline = time.monotonic() + 60
    while _owner(board, flow_id) is not None:
        assert time.monotonic() < deadline, "the finished job was never consumed"
        time.sleep(0.2)
    board.close()

    from fleetflow.common import config
    from fleetflow.compute.drivers.fake import FakeDriver

    driver = FakeDriver.from_conf(config.load(args=[], environ=procs.env))
    spawns = {i["id"]: driver.spawn_count(i["id"]) for i in body["instances"]}
    assert set(spawns.values()) == {1}, spawns
    audit = requests.get(f"{procs.url}/v2/admin/audit", params={"strict": "true"},
                         headers=ADMIN, timeout=120).json()["audit"]
    assert audit["clean"], audit["mismatches"]
