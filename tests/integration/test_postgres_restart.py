"""PostgreSQL restarts under a 100-instance reservation: the outage is waited out.

The distributed cloud of ``distributed_cloud`` (API, two conductors, one
compute agent, PostgreSQL, Redis, RabbitMQ) boots 100 instances. The local
PostgreSQL cluster is stopped (fast: every connection is cut), left down for
five seconds and started again, at two moments:

1. while the instances' boots run;
2. right after the POST answered 202, before or while a conductor picks the
   reservation up.

Nobody intervenes: the reservation must end ACTIVE, with a clean strict
audit. The time from PostgreSQL's return to the reservation's completion is
printed (``-s``).

Controlling the server needs ``pg_ctlcluster`` and a cluster under
/etc/postgresql; without them the test is skipped (failed under
FLEETFLOW_REQUIRE_SERVICES=1). The server is always started again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
import requests
import sqlalchemy as sa
from distributed_cloud import ADMIN, TENANT

# It stops the shared server every other test uses: it runs alone (tests/conftest.py).
pytestmark = pytest.mark.exclusive

COUNT = 100
DOWN_SECONDS = 5.0
SETTLED = ("ACTIVE", "ERROR", "REVERTED", "PAUSED", "FAILED")

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


def _version_key(version: str) -> list[int]:
    return [int(part) for part in version.split(".") if part.isdigit()]


def _cluster(missing_tool) -> list[str]:
    """``pg_ctlcluster`` arguments naming the newest local cluster (skip if none)."""
    root = "/etc/postgresql"
    versions = sorted(os.listdir(root), key=_version_key) if os.path.isdir(root) else []
    if not versions or shutil.which("pg_ctlcluster") is None:
        missing_tool("no local PostgreSQL cluster to restart (pg_ctlcluster, /etc/postgresql)")
    return ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main"]


def _pg_ctl(cluster: list[str], *action: str) -> None:
    subprocess.run([*cluster, *action], check=True, capture_output=True, timeout=120)


def _wait_for_postgres(url: str, timeout: float = 120.0) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql("SELECT 1")
                return
            except sa.exc.OperationalError:
                assert time.monotonic() < deadline, "PostgreSQL did not come back"
                time.sleep(0.2)
    finally:
        engine.dispose()


def _reservation(location: str) -> dict | None:
    """The reservation as the API shows it; None while the API cannot answer."""
    try:
        answer = requests.get(location, headers=TENANT, timeout=30)
    except requests.RequestException:
        return None
    if answer.status_code != 200:
        return None
    return answer.json()["reservation"]


@pytest.fixture
def pools_ping():
    """This process's PostgreSQL pools replace connections the restart killed.

    The ``pg_url`` fixture drops its database afterwards through a pooled
    connection of its own; without a ping the restart leaves it dead.
    """
    def ping(dbapi_conn, _record, _proxy):
        if not type(dbapi_conn).__module__.startswith("psycopg"):
            return
        try:
            with dbapi_conn.cursor() as cursor:
                cursor.execute("SELECT 1")
            if not dbapi_conn.autocommit:
                dbapi_conn.rollback()
        except Exception as exc:  # noqa: BLE001 - any failure: a new connection
            raise sa.exc.DisconnectionError(str(exc)) from exc

    sa.event.listen(sa.pool.Pool, "checkout", ping)
    yield
    sa.event.remove(sa.pool.Pool, "checkout", ping)


@pytest.fixture
def cloud(pools_ping, distributed_cloud, pg_url, missing_tool):
    cluster = _cluster(missing_tool)
    procs = distributed_cloud(FLEET, FLEETFLOW_COMPUTE_BOOT_SECONDS="4.0",
                              FLEETFLOW_DATABASE_MAX_RETRY_SECONDS="120")
    procs.cluster, procs.pg_url = cluster, pg_url
    return procs


def _full_log(procs, name: str) -> str:
    with open(os.path.join(procs.workdir, f"{name}.log")) as f:
        return f.read()


def _logs(procs) -> str:
    return "\n".join(f"--- {name} ---\n{procs.log(name)}" for name in ("c1", "c2", "api",
                                                                         "agent"))


def _reserve(procs) -> str:
    """POST the reservation; its URL."""
    answer = requests.post(f"{procs.url}/v2/demo/reservations", headers=TENANT, json={
        "reservation": {"name": "restart", "count": COUNT, "flavor_ref": "m1.small",
                        "image_ref": "cirros"}}, timeout=60)
    assert answer.status_code == 202, answer.text
    return answer.headers["Location"]


def _restart_postgres(procs) -> float:
    """Stop PostgreSQL, leave it down DOWN_SECONDS, start it; when it answered (monotonic).

    The answer is watched for while ``start`` runs: it may return a while
    after the server accepts connections.
    """
    try:
        _pg_ctl(procs.cluster, "stop", "-m", "fast")
        time.sleep(DOWN_SECONDS)
    finally:
        starting = subprocess.Popen([*procs.cluster, "start"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
        try:
            _wait_for_postgres(procs.pg_url)
            back = time.monotonic()
        finally:
            _, errors = starting.communicate(timeout=120)
        assert starting.returncode == 0, errors
    return back


def _wait_active(procs, location: str) -> dict:
    """The reservation once settled; it must be ACTIVE, with a clean strict audit."""
    deadline = time.monotonic() + 600
    while True:
        body = _reservation(location)
        if body and body["status"] in SETTLED:
            break
        assert time.monotonic() < deadline, (
            (body or {}).get("status"), (body or {}).get("progress"), _logs(procs))
        time.sleep(0.5)
    assert body["status"] == "ACTIVE", (body["status"], body.get("fault"), _logs(procs))
    others = [(i["name"], i["status"], i.get("task_state"), i.get("host"), i.get("fault"))
              for i in body.get("instances", []) if i["status"] != "ACTIVE"]
    assert body["progress"]["active"] == COUNT, (body["progress"], others[:5], _logs(procs))
    return body


def _assert_audit_clean(procs) -> None:
    audit = requests.get(f"{procs.url}/v2/admin/audit", params={"strict": "true"},
                         headers=ADMIN, timeout=120).json()["audit"]
    assert audit["clean"], audit["mismatches"]


def test_a_postgresql_restart_during_boots_is_waited_out(cloud):
    procs = cloud
    location = _reserve(procs)

    # Stop the server once the boots are under way (instances spawning).
    deadline = time.monotonic() + 300
    while True:
        body = _reservation(location)
        if body and body["status"] == "BUILDING" and any(
                i.get("task_state") == "spawning" for i in body.get("instances", [])):
            break
        assert body is None or body["status"] not in SETTLED, body
        assert time.monotonic() < deadline, _logs(procs)
        time.sleep(0.1)
    assert body["progress"]["active"] < COUNT, "the reservation finished before the restart"

    back = _restart_postgres(procs)
    _wait_active(procs, location)
    done = time.monotonic() - back
    _assert_audit_clean(procs)
    # The outage was met, and waited out, by the conductor running the flow.
    conductors = _full_log(procs, "c1") + _full_log(procs, "c2")
    assert "database unreachable while" in conductors, _logs(procs)
    assert "database reachable again" in conductors, _logs(procs)
    print(f"\nTIMING PostgreSQL restarted during the boots: reservation ACTIVE "
          f"{done:.1f} s after PostgreSQL returned")


def test_a_postgresql_restart_right_after_the_post_is_waited_out(cloud):
    procs = cloud
    location = _reserve(procs)
    # At once: the conductors have the job, or are about to claim it.
    back = _restart_postgres(procs)
    _wait_active(procs, location)
    done = time.monotonic() - back
    _assert_audit_clean(procs)
    print(f"\nTIMING PostgreSQL restarted right after the POST: reservation ACTIVE "
          f"{done:.1f} s after PostgreSQL returned")
