"""The API process killed with -9 between a reservation's commit and its job's post.

A real ``fleetflow serve`` (embedded: SQLite, SQL jobboard, conductors in the
process) runs with ``FLEETFLOW_CRASH_AT=provision:after-commit``: the POST
commits the reservation's rows and its flow intent, then the process kills
itself with SIGKILL before the flow's logbook is saved or its job posted.
The database then holds a PENDING reservation with an intent and no job.

``fleetflow serve`` started again on the same database and state directory,
without the crash variable, must finish the reservation on its own: its
reconciler materializes the intent and its conductors run the flow. The
reservation ends ACTIVE and the strict audit (through the API) is clean,
with no operator action. The time from the restart to ACTIVE is printed
(``-s``).
"""

from __future__ import annotations

import signal
import sqlite3
import time

import pytest
import requests

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
TENANT = {"X-Project-Id": "demo", "X-Roles": "member"}
COUNT = 5


@pytest.fixture
def server(tmp_path, free_port, wait_for_api, serve_process):
    srv = serve_process.ServeProcess(
        tmp_path, free_port, wait_for_api,
        FLEETFLOW_CONDUCTOR_RECONCILE_INTERVAL="1", FLEETFLOW_JOBBOARD_CLAIM_EXPIRY="2",
        FLEETFLOW_JOBBOARD_KEEPALIVE_INTERVAL="0.5", FLEETFLOW_COMPUTE_BOOT_SECONDS="0.2")
    yield srv
    srv.stop()


def _rows(db_path: str, reservation_id: str) -> tuple[str, int, int]:
    """(the reservation's status, its intents, jobs of its flow) as the database holds them."""
    with sqlite3.connect(db_path) as conn:
        status, flow_id = conn.execute(
            "SELECT status, flow_id FROM reservations WHERE id = ?",
            (reservation_id,)).fetchone()
        intents = conn.execute("SELECT count(*) FROM flow_intents WHERE flow_id = ?",
                               (flow_id,)).fetchone()[0]
        jobs = conn.execute("SELECT count(*) FROM jobs WHERE name = ?",
                            (flow_id,)).fetchone()[0]
    return status, intents, jobs


def _reservation_ids(db_path: str) -> list[str]:
    with sqlite3.connect(db_path) as conn:
        return [row[0] for row in conn.execute("SELECT id FROM reservations")]


def test_api_killed_between_commit_and_job_post_recovers_on_restart(server):
    server.start(FLEETFLOW_CRASH_AT="provision:after-commit")
    try:
        answer = requests.post(f"{server.url}/v2/demo/reservations", headers=TENANT, json={
            "reservation": {"name": "crash", "count": COUNT, "flavor_ref": "m1.small",
                            "image_ref": "cirros"}}, timeout=30)
    except requests.RequestException:
        answer = None  # the connection died with the process: expected
    assert answer is None or answer.status_code >= 500, answer.text
    assert server.proc.wait(30) == -signal.SIGKILL, server.log()
    assert "crash point provision:after-commit reached" in server.log()

    [reservation_id] = _reservation_ids(server.db_path)
    assert _rows(server.db_path, reservation_id) == ("PENDING", 1, 0)

    restarted = time.monotonic()
    server.start()
    body = server.wait_settled(reservation_id, timeout=60)
    done = time.monotonic() - restarted
    assert body["status"] == "ACTIVE", (body["status"], body.get("fault"), server.log())
    assert body["progress"]["active"] == COUNT
    assert body["flow_id"]
    flow = requests.get(f"{server.url}/v2/admin/flows/{body['flow_id']}", headers=ADMIN,
                        timeout=30).json()["flow"]
    assert flow["state"] == "SUCCESS", flow
    audit = requests.get(f"{server.url}/v2/admin/audit", params={"strict": "true"},
                         headers=ADMIN, timeout=120).json()["audit"]
    assert audit["clean"], audit["mismatches"]
    print(f"\nTIMING API killed after commit: reservation ACTIVE {done:.1f} s after "
          "the restart")
