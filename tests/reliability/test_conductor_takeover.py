"""kill -9 of a conductor at deterministic points and at random times; another one finishes.

Conductors are real ``fleetflow conductor`` subprocesses on the SQL jobboard
(embedded mode: SQLite). The flow claims placement resources and boots
instances on fake hosts (tests/reliability/takeover_flow.py). After every
kill another conductor takes the job over once the claim (2 s) expires. At
the end every flow is SUCCESS or REVERTED as planned, each instance was
spawned at most once (exactly once when it stays), and placement and the
hosts agree with the outcome (no leaked allocation, no orphan guest).
"""

from __future__ import annotations

import os
import random
import signal
import time

# (flow shape, crash target): one flow per target; flow i names its atoms
# "case<i>-...", so target i fires in flow i only. The reverting flows fail
# after their two instances, so their reverts pass the during-revert point.
DETERMINISTIC = [
    ("succeed", "case0-0001-claim:before-execute"),
    ("succeed", "case1-0001-boot:after-effect"),
    ("succeed", "case2-0000-boot:after-checkpoint"),
    ("revert", "case3-0001-boot:during-revert"),
    ("revert", "case4-0000-claim:after-effect"),
]



def test_kill_at_each_deterministic_point_then_another_conductor_finishes(crash_engine,
                                                                        sql_cloud):
    cloud = sql_cloud
    flow_ids = [cloud.submit(instances=2, fail=shape == "revert", pause=0.0,
                             prefix=f"case{index}")
                for index, (shape, _target) in enumerate(DETERMINISTIC)]
    # Conductor i crashes at target i, which lies in flow i. Jobs are taken
    # in posting order; conductor i+1 starts once conductor i holds flow i
    # (or died), so it can only take flows after i or finish earlier ones
    # that have no target for it: it reaches flow i+1 and dies there.
    doomed = []
    for index, (_shape, target) in enumerate(DETERMINISTIC):
        proc = cloud.spawn(f"doomed-{index}", crash_at=target)
        doomed.append(proc)
        deadline = time.monotonic() + 90
        while (proc.poll() is None and time.monotonic() < deadline
               and not any(e[0] == flow_ids[index] and e[4] == proc.pid
                           for e in cloud.events("started"))):
            time.sleep(0.05)
    for (_shape, target), proc in zip(DETERMINISTIC, doomed, strict=True):
        code = cloud.wait_exit(proc)
        assert code == -signal.SIGKILL, f"{target}: exit {code}\n{cloud.log_tail()}"
    survivor = cloud.spawn("survivor")
    cloud.wait_settled()
    states = cloud.check()
    assert [states[f] for f in flow_ids] == ["SUCCESS"] * 3 + ["REVERTED"] * 2
    assert survivor.poll() is None  # the survivor never crashed

    def count(flow_id, atom, event):
        return sum(1 for e in cloud.events(event) if e[0] == flow_id and e[1] == atom)

    # before-execute: the doomed conductor never started the claim.
    assert count(flow_ids[0], "case0-0001-claim", "started") == 1
    # after-effect: the boot happened twice (effect, kill, effect again) yet
    # the host spawned once (check() counted spawns), under two tokens.
    assert count(flow_ids[1], "case1-0001-boot", "effect") == 2
    assert len({e[3] for e in cloud.events("effect")
                if e[0] == flow_ids[1] and e[1] == "case1-0001-boot"}) == 2
    # after-checkpoint: the checkpointed boot was not run again.
    assert count(flow_ids[2], "case2-0000-boot", "effect") == 1
    # during-revert: the revert ran, was killed before its checkpoint, ran again.
    assert count(flow_ids[3], "case3-0001-boot", "reverted") == 2
    assert count(flow_ids[4], "case4-0000-claim", "effect") == 2


def test_random_kills_while_conductors_share_the_work(random_kills, sql_cloud):
    cloud = sql_cloud
    seed = int(os.environ.get("FLEETFLOW_TEST_SEED", "0")) or random.randrange(1 << 30)
    rng = random.Random(seed)
    live = [cloud.spawn(f"random-{n}") for n in range(3)]
    kills = 0
    while kills < random_kills:
        # Keep work on the board so every kill can land inside a flow.
        if len(cloud.unsettled()) < 3:
            for _ in range(3):
                cloud.submit(instances=2, fail=rng.random() < 0.3, pause=0.05)
        # Kill only conductors that have started working (a kill during
        # interpreter start-up tests nothing), at a random moment after.
        working = {e[4] for e in cloud.events("started")}
        candidates = [p for p in live if p.pid in working]
        if not candidates:
            time.sleep(0.1)
            continue
        time.sleep(rng.uniform(0.0, 1.0))
        victim = rng.choice(candidates)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(30)
        live.remove(victim)
        kills += 1
        live.append(cloud.spawn(f"random-{kills + 2}"))
    cloud.wait_settled(timeout=240)
    states = cloud.check()
    assert kills == random_kills, f"seed {seed}"
    assert len(states) >= 6 and set(states.values()) <= {"SUCCESS", "REVERTED"}
