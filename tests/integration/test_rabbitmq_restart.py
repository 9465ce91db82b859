"""RabbitMQ restarted while a 50-instance reservation boots: compute RPC carries on.

The distributed cloud of ``distributed_cloud`` (API, two conductors, one
compute agent, PostgreSQL, Redis; compute RPC over oslo.messaging on
RabbitMQ) boots 50 instances. While their boots run, the local RabbitMQ
application is stopped (``rabbitmqctl stop_app``: every connection is cut)
and started again (``rabbitmqctl start_app``). Nobody intervenes: the
reservation must end ACTIVE, each instance spawned exactly once, with a clean
strict audit. RabbitMQ is started again in a ``finally``, whatever happens.
The time from RabbitMQ's return to the reservation's completion is printed
(``-s``).

Controlling the broker needs ``rabbitmqctl`` and the local RabbitMQ; without
them the test is skipped (failed under FLEETFLOW_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest
import requests
from distributed_cloud import ADMIN, TENANT

# It stops the shared server every other test uses: it runs alone (tests/conftest.py).
pytestmark = pytest.mark.exclusive

COUNT = 50
SETTLED = ("ACTIVE", "ERROR", "REVERTED", "PAUSED", "FAILED")

FLEET = {
    "profiles": {"small": {"inventory": {
        "VCPU": {"total": 16, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 32768, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 400, "allocation_ratio": 1.0}}}},
    "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
        {"name": "r1", "hosts": 4, "profile": "small"},
        {"name": "r2", "hosts": 4, "profile": "small"}]}]}],
    "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}],
    "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
}


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=120)


def _amqp_login(rabbit_url: str) -> bool:
    """True when the broker takes an AMQP login of the tests' user."""
    import kombu

    try:
        with kombu.Connection(rabbit_url.replace("rabbit://", "amqp://", 1),
                              connect_timeout=2) as conn:
            conn.connect()
            return True
    except Exception:  # noqa: BLE001 - refused, reset, login not taken yet: not back
        return False


def _port_open(host: str = "127.0.0.1", port: int = 5672) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _wait_for_rabbitmq(rabbit_url: str, timeout: float = 120.0) -> float:
    """When the broker listens and takes a login again (monotonic)."""
    deadline = time.monotonic() + timeout
    while not (_port_open() and _amqp_login(rabbit_url)):
        assert time.monotonic() < deadline, "RabbitMQ did not come back"
        time.sleep(0.1)
    return time.monotonic()


def _reservation(location: str) -> dict:
    return requests.get(location, headers=TENANT, timeout=30).json()["reservation"]


@pytest.fixture
def cloud(distributed_cloud, rabbit_url, missing_tool):
    if shutil.which("rabbitmqctl") is None:
        missing_tool("rabbitmqctl is needed to restart RabbitMQ")
    if not rabbit_url.startswith(("rabbit://guest:guest@127.0.0.1:5672",
                                  "rabbit://guest:guest@localhost:5672")):
        missing_tool(f"this test restarts the local RabbitMQ, not {rabbit_url}")
    procs = distributed_cloud(FLEET, FLEETFLOW_COMPUTE_BOOT_SECONDS="4.0",
                              FLEETFLOW_CONDUCTOR_RECONCILE_INTERVAL="1")
    procs.rabbit_url = rabbit_url
    return procs


def _logs(procs) -> str:
    return "\n".join(f"--- {name} ---\n{procs.log(name)}" for name in ("c1", "c2", "api",
                                                                         "agent"))


def test_a_rabbitmq_restart_during_boots_is_waited_out(cloud):
    from fleetflow.common import config
    from fleetflow.compute.drivers.fake import FakeDriver

    procs = cloud
    answer = requests.post(f"{procs.url}/v2/demo/reservations", headers=TENANT, json={
        "reservation": {"name": "rabbit", "count": COUNT, "flavor_ref": "m1.small",
                        "image_ref": "cirros"}}, timeout=60)
    assert answer.status_code == 202, answer.text
    location = answer.headers["Location"]

    # Stop the broker once the boots are under way (instances spawning).
    deadline = time.monotonic() + 300
    while True:
        body = _reservation(location)
        if body["status"] == "BUILDING" and any(
                i.get("task_state") == "spawning" for i in body.get("instances", [])):
            break
        assert body["status"] not in SETTLED, body
        assert time.monotonic() < deadline, _logs(procs)
        time.sleep(0.1)
    assert body["progress"]["active"] < COUNT, "the reservation finished before the restart"

    try:
        _rabbitmqctl("stop_app")
        assert not _port_open(), "RabbitMQ still listens after stop_app"
    finally:
        _rabbitmqctl("start_app")
        back = _wait_for_rabbitmq(procs.rabbit_url)
    assert _reservation(location)["progress"]["active"] < COUNT, (
        "the reservation finished before RabbitMQ came back")

    deadline = time.monotonic() + 300
    while (body := _reservation(location))["status"] not in SETTLED:
        assert time.monotonic() < deadline, (body["status"], body["progress"], _logs(procs))
        time.sleep(0.5)
    done = time.monotonic() - back
    assert body["status"] == "ACTIVE", (body["status"], body.get("fault"), _logs(procs))
    assert body["progress"]["active"] == COUNT

    driver = FakeDriver.from_conf(config.load(args=[], environ=procs.env))
    spawns = {i["id"]: driver.spawn_count(i["id"]) for i in body["instances"]}
    assert len(spawns) == COUNT and set(spawns.values()) == {1}, spawns
    audit = requests.get(f"{procs.url}/v2/admin/audit", params={"strict": "true"},
                         headers=ADMIN, timeout=120).json()["audit"]
    assert audit["clean"], audit["mismatches"]
    print(f"\nTIMING RabbitMQ restarted during the boots: reservation ACTIVE {done:.1f} s "
          "after RabbitMQ returned")
