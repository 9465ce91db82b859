"""``kill -9`` of an embedded ``fleetflow serve`` mid-flow, then a restart: no wait.

The claims of the killed conductors would last ``[jobboard] claim_expiry``
(300 s here). Restarted on the same state directory and host, serve finds the
claims' owner recorded there and its process gone, releases them and resumes
the flow at once: the reservation is ACTIVE long before the claim could have
expired, the log says which job was taken and why, and ``fleetflow audit``
is clean. The time from the restart to ACTIVE is printed (``-s``).
"""

from __future__ import annotations

import os
import subprocess
import time

import requests

TENANT = {"X-Project-Id": "demo", "X-Roles": "member"}
CLAIM_EXPIRY_S = 300
# A functional bound, far below the claim expiry: serve's start-up plus the boots.
RESUMED_WITHIN_S = 60
COUNT = 8


def test_a_killed_serve_restarted_resumes_its_reservation_at_once(tmp_path, free_port,
                                                                  wait_for_api,
                                                                  serve_process):
    server = serve_process.ServeProcess(
        tmp_path, free_port, wait_for_api,
        FLEETFLOW_JOBBOARD_CLAIM_EXPIRY=str(CLAIM_EXPIRY_S),
        FLEETFLOW_COMPUTE_BOOT_SECONDS="3")
    try:
        server.start()
        answer = requests.post(f"{server.url}/v2/demo/reservations", headers=TENANT,
                               timeout=30, json={"reservation": {
                                   "name": "slow", "count": COUNT, "flavor_ref": "m1.small",
                                   "image_ref": "cirros"}})
        assert answer.status_code == 202, answer.text
        reservation_id = answer.json()["reservation"]["id"]
        deadline = time.monotonic() + 120
        while server.reservation(reservation_id)["status"] != "BUILDING":
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.1)
        server.kill()  # mid-boot: the boots take 3 s each

        restarted = time.monotonic()
        server.start(wait=False)
        server.wait_ready()
        answering = time.monotonic() - restarted
        body = server.wait_settled(reservation_id, timeout=RESUMED_WITHIN_S)
        active = time.monotonic() - restarted
        assert body["status"] == "ACTIVE", (body["status"], body.get("fault"), server.log())
        assert body["progress"]["active"] == COUNT
        log = server.log(tail=20000).split(f"=== run {server.runs} ===")[-1]
        assert "its claim is released and the job resumes now" in log, log

        audit = subprocess.run([serve_process.FLEETFLOW, "audit", "--strict"],
                               cwd=server.workdir, env=server.env(), capture_output=True,
                               text=True, timeout=300)
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert "0 mismatches" in audit.stdout
    finally:
        server.stop()
    assert os.listdir(os.path.join(server.workdir, "conductors")) == []
    print(f"\nTIMING serve killed with -9 mid-boot (claim expiry {CLAIM_EXPIRY_S} s): "
          f"API answering {answering:.1f} s, reservation ACTIVE {active:.1f} s after the "
          "restart")
