"""A process killed with -9 in the middle of an admission pass; another admits.

A real ``fleetflow serve`` (embedded: SQLite, SQL jobboard, conductors and the
queue's admitter in the process) runs with
``FLEETFLOW_CRASH_AT=queue-admission:during-admission``. Queued requests that
fit start a pass at once; the pass writes the first one's instance rows,
status and flow intent, then the process kills itself with SIGKILL before the
pass commits. Nothing of the pass may remain: every request still reads
QUEUED, waiting in the queue, with no instance, intent or job.

``fleetflow serve`` started again on the same database, without the crash
variable, is the other process: its admitter admits every request, each
exactly once (one flow intent and one job per reservation, as many instance
rows as asked), each ends ACTIVE, and the strict audit is clean.
"""

from __future__ import annotations

import signal
import sqlite3

import pytest
import requests

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
TENANT = {"X-Project-Id": "demo", "X-Roles": "member"}
COUNTS = (3, 2)

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path, free_port, wait_for_api, serve_process):
    srv = serve_process.ServeProcess(
        tmp_path, free_port, wait_for_api,
        FLEETFLOW_CONDUCTOR_RECONCILE_INTERVAL="1", FLEETFLOW_JOBBOARD_CLAIM_EXPIRY="2",
        FLEETFLOW_JOBBOARD_KEEPALIVE_INTERVAL="0.5", FLEETFLOW_COMPUTE_BOOT_SECONDS="0.2",
        # Looks rarely: both requests are queued before the first pass.
        FLEETFLOW_QUEUE_POLL_INTERVAL="1.5", FLEETFLOW_QUEUE_INTERVAL="2")
    yield srv
    srv.stop()


def _rows(db_path: str) -> dict[str, tuple]:
    """Each reservation: (status, its instance rows, intents and jobs of any of its flows,
    its queue entry's admitted_at is set)."""
    with sqlite3.connect(db_path) as conn:
        found = {}
        for rid, status, flow_id in conn.execute(
                "SELECT id, status, flow_id FROM reservations"):
            instances = conn.execute("SELECT count(*) FROM instances WHERE reservation_id = ?",
                                     (rid,)).fetchone()[0]
            intents = conn.execute(
                "SELECT count(*) FROM flow_intents WHERE flow_id = ?", (flow_id,)
            ).fetchone()[0] if flow_id else 0
            jobs = conn.execute("SELECT count(*) FROM jobs WHERE name = ?",
                                (flow_id,)).fetchone()[0] if flow_id else 0
            entry = conn.execute("SELECT admitted_at FROM queue_entries WHERE ref_id = ?",
                                 (rid,)).fetchone()
            found[rid] = (status, instances, intents, jobs,
                          None if entry is None else entry[0] is not None)
    return found


def test_killed_during_admission_admits_nothing_and_the_next_process_admits_once(server):
    server.start(FLEETFLOW_CRASH_AT="queue-admission:during-admission")
    posted = []
    for count in COUNTS:
        try:
            answer = requests.post(f"{server.url}/v2/demo/reservations", headers=TENANT, json={
                "reservation": {"count": count, "flavor_ref": "m1.small",
                                "image_ref": "cirros", "when_full": "queue"}}, timeout=30)
        except requests.RequestException:
            break  # the process died before this one: it was never taken
        assert answer.status_code == 202, answer.text
        assert answer.json()["reservation"]["status"] == "QUEUED"
        posted.append(answer.json()["reservation"]["id"])
    assert posted
    assert server.proc.wait(60) == -signal.SIGKILL, server.log()
    assert "crash point queue-admission:during-admission reached" in server.log()

    # The pass died before its commit: nothing of it remains.
    assert _rows(server.db_path) == {rid: ("QUEUED", 0, 0, 0, False) for rid in posted}

    server.start()
    for rid, count in zip(posted, COUNTS, strict=False):
        body = server.wait_settled(rid, timeout=90, waiting=("QUEUED",))
        assert body["status"] == "ACTIVE", (body["status"], body.get("fault"), server.log())
        assert body["progress"]["active"] == body["progress"]["total"] == count
    rows = _rows(server.db_path)
    for rid, count in zip(posted, COUNTS, strict=False):
        status, instances, intents, jobs, _ = rows[rid]
        # Admitted once: one flow, its one intent and its one job, the rows asked for.
        assert (status, instances, jobs) == ("ACTIVE", count, 1), rows[rid]
        assert intents <= 1
    audit = requests.get(f"{server.url}/v2/admin/audit", params={"strict": "true"},
                         headers=ADMIN, timeout=120).json()["audit"]
    assert audit["clean"], audit["mismatches"]
    assert "crash point" not in server.log().split("=== run 2 ===")[-1]
