"""kill -9 of conductors running the real provision flow; another one finishes.

Conductors are real ``fleetflow conductor`` subprocesses on the SQL jobboard
(embedded mode: SQLite, the simulated hosts served in-process by each
conductor from one shared state file). Reservations are made the way the API
makes them (services/reservations.py). See tests/reliability/provision_cloud.py.

1. Every atom boundary of a 5-instance reservation: one reservation per
   (atom, crash point), each on a board of its own, so the conductor that
   carries the crash target dies exactly there; a survivor finishes it.
   Reservations on the "bad" pool (hosts whose hypervisors are full behind
   placement's back) fail every build and revert, passing the during-revert
   points. For the per-instance atoms of a reverting reservation, which
   instance fails first is up to the parallel engine, so those targets name
   the atom of every instance and the first one reached fires.
2. The same reservation built in groups of two instances a task
   ([conductor] instances_per_atom): each group task at its atom boundaries,
   and inside it where its members' states part from one another (a claim
   recorded, a guest built, a failed try undone), reverting ones too.
3. At least 20 kills (FLEETFLOW_TEST_RANDOM_KILLS, default 20; half under stock) at random
   moments of conductors working through 200-instance reservations (in groups
   of 100), the second of them reverting; a new conductor replaces each one
   killed.

In the end every reservation is ACTIVE (or REVERTED, as planned), the strict
audit is clean, and no instance was spawned twice (exactly once when ACTIVE).
"""

from __future__ import annotations

import os
import random
import signal
import time

from taskflow import retry as tf_retry
from taskflow import task as tf_task
from taskflow.flow import Flow

from fleetflow.common import states
from fleetflow.common.crash_points import (
    AFTER_CHECKPOINT,
    AFTER_EFFECT,
    BEFORE_EXECUTE,
    DURING_REVERT,
    MEMBER_BUILT,
    MEMBER_CLAIMED,
    MEMBER_UNDONE,
)
from fleetflow.flows.provision.flow import provision_flow

COUNT = 5
# Instances a task in the grouped cases: groups of 2, 2 and 1.
GROUPED = 2


def flow_atoms(flow: Flow) -> list[tuple[str, str]]:
    """Every atom of ``flow`` and its nested flows as ``(name, "task" | "retry")``."""
    atoms = []
    if flow.retry is not None:
        atoms.append((flow.retry.name, "retry"))
    for node, _meta in flow.iter_nodes():
        if isinstance(node, Flow):
            atoms.extend(flow_atoms(node))
        elif isinstance(node, tf_retry.Retry):
            atoms.append((node.name, "retry"))
        elif isinstance(node, tf_task.Task):
            atoms.append((node.name, "task"))
    return atoms


def reverts(name: str) -> bool:
    """Whether the atom has a revert of its own (where during-revert fires)."""
    return any(name.endswith(suffix) for suffix in
               ("reservation-lifecycle", "claim-primaries", "-retry", "-claim", "-boot"))


def crash_plan() -> list[tuple[str, str]]:
    """``(pool, crash target)`` per case: every atom at every point that applies."""
    atoms = flow_atoms(provision_flow("enumerate", COUNT))
    plan = []
    for name, _kind in atoms:
        plan.extend(("good", f"{name}:{point}")
                    for point in (BEFORE_EXECUTE, AFTER_EFFECT, AFTER_CHECKPOINT))
    # Reverting reservations: the during-revert point of every reverting atom
    # kind, the fast path's claim killed before its checkpoint, and a boot
    # killed before it ran.
    instance_atoms = {}
    for name, _kind in atoms:
        if name.startswith("inst-"):
            instance_atoms.setdefault(name.split("-", 2)[2], []).append(name)
    for name, _kind in atoms:
        if reverts(name) and not name.startswith("inst-"):
            plan.append(("bad", f"{name}:{DURING_REVERT}"))
    for suffix in ("retry", "claim", "boot"):
        plan.append(("bad", ",".join(f"{n}:{DURING_REVERT}" for n in instance_atoms[suffix])))
    plan.append(("bad", f"claim-primaries:{AFTER_EFFECT}"))
    plan.append(("bad", ",".join(f"{n}:{BEFORE_EXECUTE}" for n in instance_atoms["boot"])))
    plan.append(("bad", ",".join(f"{n}:{AFTER_CHECKPOINT}" for n in instance_atoms["retry"])))
    return plan


def grouped_crash_plan() -> list[tuple[str, str]]:
    """``(pool, crash target)`` per case of the grouped flow. A member point names
    every group (the first member to get there fires), so do the reverting ones."""
    groups = [name for name, _kind in flow_atoms(provision_flow("enumerate", COUNT,
                                                                batch=GROUPED))
              if name.startswith("batch-")]

    def every(point: str) -> str:
        return ",".join(f"{name}:{point}" for name in groups)

    plan = [("good", f"{groups[1]}:{point}")
            for point in (BEFORE_EXECUTE, AFTER_EFFECT, AFTER_CHECKPOINT)]
    # A good reservation's members were claimed by the fast path, so a member's own
    # claim (after a failed build) happens in the reverting ones.
    plan.append(("good", every(MEMBER_BUILT)))
    plan += [("bad", every(point)) for point in (MEMBER_CLAIMED, MEMBER_UNDONE, DURING_REVERT)]
    return plan


def test_the_plan_covers_every_atom_of_the_flow():
    atoms = flow_atoms(provision_flow("enumerate", COUNT))
    names = {name for name, _ in atoms}
    assert {"reservation-lifecycle", "schedule", "claim-primaries", "finish"} <= names
    for index in range(COUNT):
        assert {f"inst-{index:04d}-{step}" for step in ("retry", "claim", "boot")} <= names
    targeted = {t.split(":")[0] for _pool, targets in crash_plan() for t in targets.split(",")}
    assert targeted == names
    grouped = {name for name, _ in flow_atoms(provision_flow("enumerate", COUNT,
                                                             batch=GROUPED))}
    assert {"batch-0000", "batch-0002", "batch-0004"} <= grouped
    assert not any(name.startswith("inst-") for name in grouped)
    targeted = {t.split(":")[0] for _pool, targets in grouped_crash_plan()
                for t in targets.split(",")}
    assert targeted == {name for name in grouped if name.startswith("batch-")}


def test_a_guest_one_conductor_built_is_seen_from_another_process(provision_cloud):
    cloud = provision_cloud
    rid = cloud.reserve(COUNT)
    cloud.spawn("builder")
    cloud.wait_settled()
    assert cloud.problems({rid: states.ACTIVE}) == []
    # The test process serves the same hosts from the same state file: its
    # RPC calls reach its own agent, which finds the conductor's guests.
    for inst in cloud.instances(rid):
        guest = cloud.compute.get_instance(inst["host"], inst["uuid"])
        assert guest is not None and guest["state"] == states.ACTIVE


def test_kill_at_every_atom_boundary_of_a_5_instance_reservation(
        boundaries, assert_run_by_crash_engine, provision_cloud, provision_harness,
        assert_audit_clean):
    run_plan(provision_cloud, boundaries(crash_plan()), assert_run_by_crash_engine,
             provision_harness, assert_audit_clean)


def test_kill_inside_the_groups_of_a_5_instance_reservation(
        boundaries, assert_run_by_crash_engine, provision_cloud, provision_harness,
        assert_audit_clean):
    provision_cloud.conf.set_override("instances_per_atom", GROUPED, group="conductor")
    run_plan(provision_cloud, boundaries(grouped_crash_plan()), assert_run_by_crash_engine,
             provision_harness, assert_audit_clean)


def run_plan(cloud, plan, assert_run_by_crash_engine, provision_harness,
             assert_audit_clean) -> None:
    """One case per ``(pool, target)`` of ``plan``: each conductor dies there, a
    survivor settles it, and the cloud ends as planned with a clean audit."""
    cloud.fill_bad_hosts()
    cases = [provision_harness.CrashCase(i, target, pool, COUNT)
             for i, (pool, target) in enumerate(plan)]
    provision_harness.run_crash_cases(cloud, cases, parallel=6)
    not_killed = [c for c in cases if c.doomed_code != -signal.SIGKILL
                  or c.fired(cloud) not in c.target.split(",")]
    assert not not_killed, f"these conductors did not die at their target: {not_killed}\n" \
        + cloud.log_tail(names={f"doomed-{c.index}" for c in not_killed})
    cloud.clear_bad_hosts()
    expected = {c.reservation_id: states.ACTIVE if c.pool == "good" else states.REVERTED
                for c in cases}
    assert_run_by_crash_engine(cloud.backend,
                               [r["flow_id"] for r in cloud.reservations.values()])
    problems = cloud.problems(expected)
    assert not problems, "\n".join(problems)
    report = assert_audit_clean(*cloud.audit_args(), explain=lambda text: cases_named(
        cloud, cases, text))
    assert report.counts["instances"] >= len(cases) * COUNT


def cases_named(cloud, cases, text: str) -> str:
    """The cases whose instances ``text`` names, with their conductors' logs."""
    named = [c for c in cases
             if any(inst["uuid"] in text for inst in cloud.instances(c.reservation_id))]
    return "\n".join(f"{c} fired {c.fired(cloud)}:\n" + cloud.log_tail(
        lines=60, names={f"doomed-{c.index}", f"survivor-{c.index}"}) for c in named)


def test_random_kills_in_200_instance_reservations(random_kills, provision_cloud_factory,
                                                   assert_audit_clean):
    # One bad host: each instance there fails once, then finds nothing to
    # reschedule onto (a 200-instance revert costs ~20 s of CPU as it is).
    # Two builds at once a host: a group sends its members' builds together, so a
    # reservation's boots come in waves of the hosts' build slots (12 here, some
    # 3 s for 200), which keeps the builds going long enough for kills to land.
    cloud = provision_cloud_factory(good_hosts=6, bad_hosts=1, vcpus=512, boot_seconds=0.2,
                                    builds_per_host=2)
    seed = int(os.environ.get("FLEETFLOW_TEST_SEED", "0")) or random.randrange(1 << 30)
    rng = random.Random(seed)
    cloud.fill_bad_hosts()
    expected: dict[str, str] = {}

    def post():
        # The second reservation lands on the bad host and reverts, so kills
        # also hit a revert of 200 instances.
        pool = "bad" if len(expected) == 1 else "good"
        expected[cloud.reserve(200, pool)] = (states.ACTIVE if pool == "good"
                                              else states.REVERTED)

    live = [cloud.spawn(f"random-{n}") for n in range(3)]
    kills, spawned = 0, 3
    while kills < random_kills:
        # Keep 200-instance reservations on the board so kills land in them.
        while len(cloud.unsettled()) < 3:
            # The good hosts hold 15 (6 x 512 VCPU): kills that find no conductor
            # at work must not go on until every new reservation is refused.
            assert len(expected) < 15, (f"seed {seed}: {kills} kills in {len(expected)} "
                                        "reservations; the builds end before kills land")
            post()
        # Kill only a conductor that holds a reservation's job (a kill of an
        # idle one tests nothing), at a random moment of its work.
        time.sleep(rng.uniform(0.2, 1.5))
        working = [p for p in live if f"{p.name}-0" in cloud.owners()]
        if not working:
            continue
        victim = rng.choice(working)
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait(30) == -signal.SIGKILL
        live.remove(victim)
        kills += 1
        live.append(cloud.spawn(f"random-{spawned}"))
        spawned += 1
    cloud.wait_settled(timeout=300)
    cloud.clear_bad_hosts()
    problems = cloud.problems(expected)
    assert not problems, f"seed {seed}\n" + "\n".join(problems[:20])
    report = assert_audit_clean(*cloud.audit_args())
    assert report.counts["instances"] == 200 * len(expected)
    assert states.REVERTED in expected.values() and states.ACTIVE in expected.values()
    print(f"seed {seed}: {kills} kills over {len(expected)} reservations of 200 "
          f"({sum(v == states.REVERTED for v in expected.values())} reverted)")
