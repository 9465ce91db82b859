"""kill -9 of the conductor whose recovery monitor acts, at the worst moments.

Real ``fleetflow conductor`` subprocesses (tests/reliability/evacuation_cloud.py,
forked by its fork server) run the recovery monitor (``[recovery] enabled``);
the test only kills a host (``simulate --dead``) and conductors:

1. the first acting conductor dies (SIGKILL, ``FLEETFLOW_CRASH_AT
   recovery:after-effect``) once the host is fenced and committed, before
   its evacuation exists;
2. the next one takes the monitor's lease over, creates that very
   evacuation (the id recorded with the fence) and dies (SIGKILL) in the
   middle of it, a server's move done and not yet recorded;
3. a third finishes the evacuation (its job taken over on the board) and
   the recovery (the lease).

Then: exactly one evacuation of the host, the one the fence recorded; the
recovery DONE; every server ACTIVE elsewhere, once; the host, brought back,
destroys exactly its old copies; the strict audit is clean.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.services.recovery import act

pytestmark = pytest.mark.slow

COUNT = 5
RECOVERY_SETTINGS = {
    "FLEETFLOW_RECOVERY_ENABLED": "true",
    "FLEETFLOW_RECOVERY_INTERVAL": "0.2",
    "FLEETFLOW_RECOVERY_CONFIRM_SECONDS": "1",
    "FLEETFLOW_COMPUTE_SERVICE_DOWN_TIME": "2",
    "FLEETFLOW_COMPUTE_HEARTBEAT_INTERVAL": "0.25",
}
AFTER_FENCE = f"{act.CRASH_ATOM}:after-effect"
# The second server's move done on the hosts, its result not yet saved.
DURING_EVACUATION = "srv-0001-move:after-effect"


def _until(what, predicate, timeout, cloud, names):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if predicate(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached: {value}\n" + cloud.log_tail(names=names))
        time.sleep(0.2)


def _recoveries(cloud, host):
    from fleetflow.persistence import recoveries as rows

    with cloud.database.read_session() as session:
        return [rows.view(r) for r in session.scalars(
            sa.select(rows.Recovery).where(rows.Recovery.host == host))]


def _evacuations_of(cloud, host) -> list:
    from fleetflow.persistence.models import Evacuation

    with cloud.database.read_session() as session:
        return [(e.id, e.flow_id) for e in session.scalars(sa.select(Evacuation))
                if host in e.hosts]


def _died_at(cloud, proc, target: str) -> bool:
    """``proc`` killed itself (SIGKILL) at ``target``, as its log says."""
    if proc.wait(60) != -signal.SIGKILL:
        return False
    with open(os.path.join(cloud.workdir, f"conductor-{proc.name}.log"),
              errors="replace") as fh:
        return f"crash point {target} reached" in fh.read()


def test_kill_9_of_the_acting_monitor_after_the_fence_and_during_the_evacuation(
        monkeypatch, evacuation_cloud_factory, assert_audit_clean):
    for key, value in RECOVERY_SETTINGS.items():
        monkeypatch.setenv(key, value)
    # 1 host of 8 dies: under the storm guard's 0.2.
    cloud = evacuation_cloud_factory(sources=2, targets=6)
    host = cloud.take_source()
    servers = cloud.boot(host, COUNT)
    # Heartbeats of every host before any monitor looks.
    time.sleep(3 * float(RECOVERY_SETTINGS["FLEETFLOW_COMPUTE_HEARTBEAT_INTERVAL"]))

    first = cloud.spawn("first", crash_at=AFTER_FENCE)
    cloud.host_ops.simulate(host, dead=True)
    assert _died_at(cloud, first, AFTER_FENCE), cloud.log_tail(names={"first"})
    [fenced] = _recoveries(cloud, host)
    assert fenced["status"] == "FENCED" and fenced["evacuation_id"], fenced
    recorded = fenced["evacuation_id"]
    assert _evacuations_of(cloud, host) == []  # died before creating it

    second = cloud.spawn("second", crash_at=DURING_EVACUATION)
    assert _died_at(cloud, second, DURING_EVACUATION), cloud.log_tail(names={"second"})
    [(made, flow_id)] = _evacuations_of(cloud, host)
    assert made == recorded

    survivor = cloud.spawn("survivor")
    [done] = _until(lambda: _recoveries(cloud, host),
                    lambda found: found and found[0]["status"] not in (
                        "FENCED", "EVACUATING"), 120, cloud, {"second", "survivor"})
    assert done["status"] == "DONE", done
    assert [e["event"] for e in done["timeline"]] == [
        "suspect", "dead", "fenced", "evacuation", "done"]
    assert _evacuations_of(cloud, host) == [(recorded, flow_id)]
    assert survivor.poll() is None

    cloud.evacuations[recorded] = {
        "board": None, "flow_id": flow_id, "mode": states.MODE_REBUILD, "source": host,
        "servers": servers, "expected": states.DONE, "fault_code": None,
        # A try re-run after the crash counts once, but the move re-done may count
        # twice on the hosts: not foreseeable here.
        "completed_moves": {}, "tries": None}
    cloud.wait_settled(timeout=60)
    assert cloud.revive(host) == sorted(servers)
    problems = cloud.problems()
    assert not problems, "\n".join(problems)
    report = assert_audit_clean(*cloud.audit_args())
    assert report.counts["instances"] == COUNT
