"""A Redis jobboard restarted EMPTY loses no flow: the board is rebuilt from the database.

The distributed cloud of distributed_cloud.py (PostgreSQL, Redis, RabbitMQ;
``fleetflow serve`` for the API, ``fleetflow conductor`` processes, one
compute agent) and the local Redis server itself, which these tests stop
without saving (``redis-cli shutdown nosave``) and start again empty, as a
Redis that keeps nothing on disk comes back after a crash:

1. while a 300-instance reservation runs: its conductor's keep-alive finds
   the job gone, posts it again and carries on;
2. while ten reservations wait on the board with no conductor running: the
   reconciler posts them again, and the conductor started then runs them;
3. a POST while Redis is down answers 202 and its reservation completes once
   Redis is back.

Each ends with every reservation ACTIVE, one spawn per instance, no job left
on the board and a clean strict audit, without an operator. Redis is
started again in a ``finally``, whatever happens. The time from Redis's
return to the job back on the board and to the end is printed (``-s``).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time

import pytest
import requests
from distributed_cloud import ADMIN, TENANT
from distributed_cloud import board as _board

# It stops the shared server every other test uses: it runs alone (tests/conftest.py).
pytestmark = pytest.mark.exclusive

REDIS_START = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1",
               "--port", "6379", "--save", "", "--appendonly", "no",
               "--dir", "/var/lib/redis", "--logfile", "/var/log/redis/ci.log"]
UNFINISHED = ("PENDING", "SCHEDULING", "BUILDING", "REVERTING")

FLEET = {
    "profiles": {"small": {"inventory": {
        "VCPU": {"total": 16, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 32768, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 400, "allocation_ratio": 1.0}}}},
    "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
        {"name": "r1", "hosts": 12, "profile": "small"},
        {"name": "r2", "hosts": 12, "profile": "small"}]}]}],
    "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}],
    "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
}


def _redis_ping() -> bool:
    return subprocess.run(["redis-cli", "ping"], capture_output=True, text=True,
                          timeout=10).stdout.strip() == "PONG"


def _start_redis() -> float:
    """Start the local Redis (empty); returns when it answered again (monotonic)."""
    if not _redis_ping():
        subprocess.run(REDIS_START, check=True, capture_output=True, timeout=30)
    deadline = time.monotonic() + 30
    while not _redis_ping():
        assert time.monotonic() < deadline, "Redis did not come back"
        time.sleep(0.05)
    return time.monotonic()


@contextlib.contextmanager
def redis_down():
    """Redis stopped without saving inside the block, started EMPTY on the way out.

    ``back["at"]``: when it answered again.
    """
    back: dict = {}
    subprocess.run(["redis-cli", "shutdown", "nosave"], capture_output=True, timeout=30)
    deadline = time.monotonic() + 30
    while _redis_ping():
        assert time.monotonic() < deadline, "Redis did not stop"
        time.sleep(0.05)
    try:
        yield back
    finally:
        back["at"] = _start_redis()


@pytest.fixture
def make_cloud(distributed_cloud, redis_url, missing_tool):
    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        missing_tool("redis-server and redis-cli are needed to restart Redis")
    if not redis_url.startswith(("redis://127.0.0.1:6379", "redis://localhost:6379")):
        missing_tool(f"these tests restart the local Redis, not {redis_url}")
    made = []

    def _make(**settings):
        procs = distributed_cloud(FLEET, FLEETFLOW_CONDUCTOR_RECONCILE_INTERVAL="1",
                                  **settings)
        made.append(procs)
        return procs

    yield _make
    _start_redis()  # whatever happened in the test
    for procs in made:
        procs.stop_all()
        import redis

        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=f"{procs.env['FLEETFLOW_JOBBOARD_BOARD_NAME']}*"):
            client.delete(key)
        client.close()


def _reserve(procs, count: int) -> tuple[str, str]:
    """POST a reservation; (its URL, its flow id)."""
    answer = requests.post(f"{procs.url}/v2/demo/reservations", headers=TENANT, json={
        "reservation": {"count": count, "flavor_ref": "m1.small", "image_ref": "cirros"}},
        timeout=60)
    assert answer.status_code == 202, answer.text
    location = answer.headers["Location"]
    return location, _get(location)["flow_id"]


def _get(location: str) -> dict:
    return requests.get(location, headers=TENANT, timeout=30).json()["reservation"]


def _wait_final(procs, locations: list[str], timeout: float = 900.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        bodies = [_get(location) for location in locations]
        if all(body["status"] not in UNFINISHED for body in bodies):
            return bodies
        assert time.monotonic() < deadline, (
            [(b["id"], b["status"], b["progress"]) for b in bodies],
            {name: procs.log(name) for name in procs.procs})
        time.sleep(0.5)


def _wait_jobs(procs, flow_ids: set[str], timeout: float = 120.0) -> float:
    """When every flow of ``flow_ids`` has a job on the board again (monotonic)."""
    board = _board(procs.env)
    names: set[str] = set()
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(Exception):  # the board may still be coming back
                names = {job.name for job in board.iterjobs(ensure_fresh=True)}
                if flow_ids <= names:
                    return time.monotonic()
            assert time.monotonic() < deadline, (
                "the lost jobs were never posted again", sorted(flow_ids - names),
                {name: procs.log(name) for name in procs.procs})
            time.sleep(0.05)
    finally:
        board.close()


def _check_clean(procs, bodies: list[dict]) -> None:
    """Every reservation ACTIVE, one spawn per instance, no job left, strict audit clean."""
    from fleetflow.common import config
    from fleetflow.compute.drivers.fake import FakeDriver

    assert [b["status"] for b in bodies] == ["ACTIVE"] * len(bodies), [
        (b["status"], b["fault"]) for b in bodies]
    driver = FakeDriver.from_conf(config.load(args=[], environ=procs.env))
    spawns = {i["id"]: driver.spawn_count(i["id"]) for b in bodies for i in b["instances"]}
    assert set(spawns.values()) == {1}, spawns
    for body in bodies:
        # The row reads ACTIVE from the flow's last task; the flow's own SUCCESS is
        # checkpointed just after it, so it may still read RUNNING for a moment.
        deadline = time.monotonic() + 30
        while True:
            flow = requests.get(f"{procs.url}/v2/admin/flows/{body['flow_id']}",
                                headers=ADMIN, timeout=30).json()["flow"]
            if flow["state"] != "RUNNING" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert flow["state"] == "SUCCESS", flow
    board = _board(procs.env)
    try:
        deadline = time.monotonic() + 60
        while list(board.iterjobs(ensure_fresh=True)):
            assert time.monotonic() < deadline, "finished jobs were never consumed"
            time.sleep(0.2)
    finally:
        board.close()
    audit = requests.get(f"{procs.url}/v2/admin/audit", params={"strict": "true"},
                         headers=ADMIN, timeout=300).json()["audit"]
    assert audit["clean"], audit["mismatches"]


def test_redis_restarted_empty_while_a_300_instance_reservation_runs(make_cloud):
    # 300 boots of 2 s, one at a time on each of the 24 hosts (a group sends its
    # members' builds together, so the hosts' build slots are what paces them):
    # about 25 s of work.
    procs = make_cloud(FLEETFLOW_COMPUTE_BOOT_SECONDS="2.0",
                       FLEETFLOW_COMPUTE_MAX_CONCURRENT_BUILDS="1",
                       FLEETFLOW_CONDUCTOR_ENGINE_WORKERS="32")
    location, flow_id = _reserve(procs, 300)
    deadline = time.monotonic() + 300
    while (body := _get(location))["progress"]["active"] < 30:
        assert time.monotonic() < deadline, (body, procs.log("c1"), procs.log("c2"))
        time.sleep(0.2)
    with redis_down() as back:
        time.sleep(2.0)  # down for a while: the keep-alive meets errors first
    assert _get(location)["progress"]["active"] < 300, "finished before Redis came back"
    reposted_at = _wait_jobs(procs, {flow_id})
    [body] = _wait_final(procs, [location])
    done = time.monotonic() - back["at"]
    _check_clean(procs, [body])
    logs = procs.log("c1") + procs.log("c2")
    assert "carrying on under job" in logs  # replaced by its keep-alive, not suspended
    print(f"\nTIMING 300-instance reservation: job back {reposted_at - back['at']:.2f} s "
          f"and reservation ACTIVE {done:.1f} s after Redis returned")


def test_redis_restarted_empty_while_reservations_wait_on_the_board(make_cloud):
    procs = make_cloud(FLEETFLOW_COMPUTE_BOOT_SECONDS="0.2")
    for name in ("c1", "c2"):  # nobody runs the jobs: they wait on the board
        procs.procs[name].terminate()
        procs.procs[name].wait(60)
    posted = [_reserve(procs, 3) for _ in range(10)]
    flow_ids = {flow_id for _, flow_id in posted}
    _wait_jobs(procs, flow_ids)
    with redis_down() as back:
        pass
    board = _board(procs.env)
    try:
        assert not {j.name for j in board.iterjobs(ensure_fresh=True)} & flow_ids
    finally:
        board.close()
    procs.start("c3", "conductor", "--name", "c3")
    reposted_at = _wait_jobs(procs, flow_ids)
    bodies = _wait_final(procs, [location for location, _ in posted])
    done = time.monotonic() - back["at"]
    _check_clean(procs, bodies)
    print(f"\nTIMING 10 waiting reservations: jobs back {reposted_at - back['at']:.2f} s "
          f"and all ACTIVE {done:.1f} s after Redis returned")


def test_a_post_while_redis_is_down_answers_202_and_completes_once_it_is_back(make_cloud):
    procs = make_cloud(FLEETFLOW_COMPUTE_BOOT_SECONDS="0.2")
    with redis_down() as back:
        started = time.monotonic()
        location, flow_id = _reserve(procs, 5)
        answered = time.monotonic() - started
        time.sleep(2.0)
        assert _get(location)["status"] == "PENDING"
    reposted_at = _wait_jobs(procs, {flow_id})
    [body] = _wait_final(procs, [location])
    done = time.monotonic() - back["at"]
    _check_clean(procs, [body])
    print(f"\nTIMING POST while Redis down: 202 in {answered:.2f} s; job posted "
          f"{reposted_at - back['at']:.2f} s and reservation ACTIVE {done:.1f} s after "
          "Redis returned")
