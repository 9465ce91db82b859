"""Distributed mode: conductors on TaskFlow's Redis jobboard and PostgreSQL, killed and frozen.

Conductor processes run the flow of tests/reliability/takeover_flow.py
(placement claims in PostgreSQL, boots on fake hosts). One is killed with
SIGKILL mid-flow and another finishes; one is frozen with SIGSTOP past its
claim's expiry while another takes the job over, then thawed with SIGCONT:
its stale writes are refused by the fence and nothing happens twice.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time

import pytest

RELIABILITY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "reliability")


@pytest.fixture
def redis_cloud(tmp_path, pg_url, redis_url):
    if RELIABILITY not in sys.path:
        sys.path.insert(0, RELIABILITY)
    takeover = importlib.import_module("takeover_flow")
    cloud = takeover.TakeoverCloud(tmp_path, pg_url, board="redis", redis_url=redis_url)
    yield cloud
    cloud.close()
    # The board's keys live under a namespace of this test only: drop them.
    import redis

    client = redis.Redis.from_url(redis_url)
    namespace = cloud.env["FLEETFLOW_JOBBOARD_BOARD_NAME"]
    for key in client.scan_iter(match=f"{namespace}*"):
        client.delete(key)
    client.close()


def _wait_for(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_kill_9_on_redis_board_then_another_conductor_finishes(redis_cloud):
    cloud = redis_cloud
    # One flow on the board at a time, so each doomed conductor surely
    # reaches its crash point (the Redis board lists newest jobs first).
    succeed = cloud.submit(instances=2, pause=0.0, prefix="ok")
    first = cloud.spawn("first", crash_at="ok-0001-boot:after-effect")
    assert cloud.wait_exit(first) == -signal.SIGKILL, cloud.log_tail()
    revert = cloud.submit(instances=2, fail=True, pause=0.0, prefix="bad")
    second = cloud.spawn("second", crash_at="bad-0000-boot:during-revert")
    assert cloud.wait_exit(second) == -signal.SIGKILL, cloud.log_tail()
    cloud.spawn("survivor")
    cloud.wait_settled()
    states = cloud.check()
    assert states == {succeed: "SUCCESS", revert: "REVERTED"}


def test_a_frozen_owner_is_fenced_out_when_it_thaws(redis_cloud):
    cloud = redis_cloud
    flow_id = cloud.submit(instances=2, pause=1.0, prefix="slow")
    owner = cloud.spawn("owner")
    # Freeze the owner inside its first task, before the side effect.
    _wait_for(lambda: any(e[4] == owner.pid for e in cloud.events("started")),
              what="the owner to start a task")
    owner.send_signal(signal.SIGSTOP)
    frozen_atom = next(e[1] for e in cloud.events("started") if e[4] == owner.pid)
    # The claim expires (2 s, no keep-alive while frozen); another conductor
    # takes the job with a newer token and redoes the frozen task.
    rival = cloud.spawn("rival")
    _wait_for(lambda: any(e[1] == frozen_atom and e[4] == rival.pid
                          for e in cloud.events("effect")),
              what="the rival to redo the frozen task")
    owner.send_signal(signal.SIGCONT)
    # The thawed owner finishes its sleep and tries its effect with the old token.
    _wait_for(lambda: any(e[4] == owner.pid for e in cloud.events("rejected")),
              what="the stale write to be refused")
    cloud.wait_settled()
    states = cloud.check()  # one spawn per instance, allocations as booted
    assert states == {flow_id: "SUCCESS"}
    [rejected] = [e for e in cloud.events("rejected") if e[4] == owner.pid]
    assert rejected[1] == frozen_atom and rejected[3] == 1
    assert not [e for e in cloud.events("effect") if e[4] == owner.pid]
    # The owner's engine stopped at its refused checkpoint: the flow detail
    # is the rival's (SUCCESS, every atom SUCCESS), and the owner lives on.
    from fleetflow.engine.submit import load_status

    status = load_status(cloud.backend, flow_id)
    assert {a["state"] for a in status["atoms"]} == {"SUCCESS"}
    assert owner.poll() is None
