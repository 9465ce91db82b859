"""kill -9 of conductors running the real evacuate flow; another one finishes.

Conductors are real ``fleetflow conductor`` subprocesses on the SQL jobboard
(embedded mode: SQLite, the simulated hosts served in-process by each
conductor from one shared state file). Servers are made consistently on a
source host of their own (row, placement claim, guest), the host is killed
and set down for a rebuild, and the evacuation is created the way the API
creates it (services/evacuations.py). See tests/reliability/evacuation_cloud.py.

1. Every atom boundary of a 5-server evacuation, in each of ``rebuild``,
   ``live`` and ``cold``: one evacuation per (mode, atom, crash point), each
   on a board of its own, so the conductor that carries the crash target
   dies exactly there; a survivor finishes it. Then the during-revert point
   of the atoms that undo something when a try fails:

   - a claim and a move: every server's move fails at its switch-over, so
     the first chain to revert fires; the fault is lifted before the
     survivor starts, whose retries move the servers elsewhere;
   - an attach, which reverts only when the confirm after it fails: a first
     conductor dies just before a confirm, that server's destination dies,
     a second conductor's confirm fails there and reverts the attach (and
     dies); the destination is back for the survivor, which undoes the
     completed move and moves the server elsewhere.

   - the lifecycle marker, which reverts only when the whole flow fails (a
     server's failure never does): a rebuild whose dead host answers again
     after the request was accepted, before a conductor runs it; the flow's
     host check fails, and the evacuation ends FAILED with its servers
     where they were (the operator then sets the host up again).

   The fast path's claim (claim-primaries) and the retry controllers revert
   only in such a whole-flow revert too, and none of them has run by the
   time the host check fails: no case reaches them.
2. The same evacuation moved in groups ([conductor] instances_per_atom = 2, two
   lanes: tasks of servers 0 and 2, then 4; 1 and 3): a group task at each of
   its atom boundaries (rebuild), and, in every mode, inside the groups at the
   first member claimed, the first member moved (not confirmed), and the first
   failed try undone (every server's move failing at its switch-over, as in
   ``fail`` above). A group reverts only in a whole-flow revert, which no case
   here reaches once moves have begun (the ``alive`` case fails before).
3. At least 20 kills (FLEETFLOW_TEST_RANDOM_KILLS, default 20; half under stock) at random
   moments of conductors working through 100-server evacuations (live,
   rebuild and cold in turn, moves lasting 0.05 s); a new conductor replaces
   each one killed.

In the end every evacuation is DONE (or FAILED, as planned), each server
runs once, on the host its row names, holding allocations only there, with
no migration consumer left, as many completed moves as planned (one; two
for a server whose completed move was undone on purpose; none when nothing
moved) and one try per server unless a try was made to fail (a try re-run
after a crash counts once); every host a rebuild evacuated destroys its old
copies when it comes back; and the strict audit is clean.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import time

import pytest

from fleetflow.common import states
from fleetflow.common.crash_points import MEMBER_CLAIMED, MEMBER_MOVED, MEMBER_UNDONE
from fleetflow.flows.evacuate.flow import evacuate_flow
from fleetflow.flows.tasks.base import (
    AFTER_CHECKPOINT,
    AFTER_EFFECT,
    BEFORE_EXECUTE,
    DURING_REVERT,
)

COUNT = 5
LANES = 5
MODES = (states.MODE_REBUILD, states.MODE_LIVE, states.MODE_COLD)
# Cases at once: each spends most of its time waiting for a dead conductor's
# claim to expire, so more run than there are cores.
PARALLEL = 16
# Targets every evacuation shares; a case whose destination dies has 3 alone.
SHARED_TARGETS = 8
OWN_TARGETS = 3
# Servers a task, and lanes, in the grouped cases.
GROUPED = 2
GROUPED_LANES = 2


def every_server(step: str, point: str) -> str:
    """A target naming ``step`` of every server: the first one reached fires."""
    return ",".join(f"srv-{index:04d}-{step}:{point}" for index in range(COUNT))


def crash_plan(flow_atoms) -> list[dict]:
    """Keyword arguments of one EvacuationCase each: every atom at every point, per mode."""
    atoms = flow_atoms(evacuate_flow("enumerate", COUNT, lanes=LANES))
    plan = []
    for mode in MODES:
        for name, _kind in atoms:
            plan.extend({"mode": mode, "target": f"{name}:{point}"}
                        for point in (BEFORE_EXECUTE, AFTER_EFFECT, AFTER_CHECKPOINT))
        for step in ("claim", "move"):
            plan.append({"mode": mode, "target": every_server(step, DURING_REVERT),
                         "revert": "fail"})
        plan.append({"mode": mode, "target": every_server("attach", DURING_REVERT),
                     "revert": "confirm", "lanes": 1,
                     "prelude": every_server("confirm", BEFORE_EXECUTE)})
    plan.append({"mode": states.MODE_REBUILD, "revert": "alive",
                 "target": f"evacuation-lifecycle:{DURING_REVERT}"})
    return plan


def grouped_crash_plan(flow_atoms) -> list[dict]:
    """Keyword arguments of one EvacuationCase each, for the flow in groups."""
    groups = [name for name, _kind in flow_atoms(evacuate_flow(
        "enumerate", COUNT, lanes=GROUPED_LANES, batch=GROUPED)) if name.startswith("batch-")]

    def every(point: str) -> str:
        return ",".join(f"{name}:{point}" for name in groups)

    plan = [{"mode": states.MODE_REBUILD, "target": f"{groups[1]}:{point}"}
            for point in (BEFORE_EXECUTE, AFTER_EFFECT, AFTER_CHECKPOINT)]
    for mode in MODES:
        plan += [{"mode": mode, "target": every(point)} for point in (MEMBER_CLAIMED,
                                                                        MEMBER_MOVED)]
        plan.append({"mode": mode, "target": every(MEMBER_UNDONE), "revert": "fail"})
    return [dict(case, lanes=GROUPED_LANES) for case in plan]


def test_the_plan_covers_every_atom_of_the_flow_in_every_mode(evacuation_harness):
    atoms = evacuation_harness.flow_atoms(evacuate_flow("enumerate", COUNT, lanes=LANES))
    names = {name for name, _ in atoms}
    assert {"evacuation-lifecycle", "prepare-hosts", "schedule", "finish"} <= names
    for index in range(COUNT):
        assert {f"srv-{index:04d}-{step}"
                for step in ("retry", "claim", "move", "attach", "confirm")} <= names
    plan = crash_plan(evacuation_harness.flow_atoms)
    for mode in MODES:
        targets = [t for case in plan if case["mode"] == mode
                   for t in case["target"].split(",")]
        assert {t.rsplit(":", 1)[0] for t in targets} == names
        reverting = {t.split(":")[0].rsplit("-", 1)[-1] if t.startswith("srv-")
                     else t.split(":")[0] for t in targets if t.endswith(DURING_REVERT)}
        assert reverting == {"claim", "move", "attach"} | (
            {"evacuation-lifecycle"} if mode == states.MODE_REBUILD else set())
    grouped = {name for name, _ in evacuation_harness.flow_atoms(evacuate_flow(
        "enumerate", COUNT, lanes=GROUPED_LANES, batch=GROUPED))}
    assert {"batch-0000", "batch-0001", "batch-0004"} <= grouped
    assert not any(name.startswith("srv-") for name in grouped)
    targeted = {t.split(":")[0] for case in grouped_crash_plan(evacuation_harness.flow_atoms)
                for t in case["target"].split(",")}
    assert targeted == {name for name in grouped if name.startswith("batch-")}


def _rebuilt_hosts_destroyed_their_copies(cloud) -> list[str]:
    """Each host a rebuild evacuated, brought back, destroyed exactly its old copies."""
    revived = cloud.revive_rebuild_sources()
    wrong = []
    for eid, evacuation in cloud.evacuations.items():
        if evacuation["mode"] == states.MODE_REBUILD:
            destroyed = revived.get(evacuation["source"])
            rebuilt = (sorted(evacuation["servers"]) if evacuation["expected"] == states.DONE
                       else [])
            if destroyed != rebuilt:
                wrong.append(f"{eid}: {evacuation['source']} destroyed {destroyed}, not "
                             f"{rebuilt}")
    return wrong


def _assert_died_where_planned_and_recovered(cloud, cases, assert_audit_clean) -> None:
    """Every doomed conductor died at its target, and the world is as planned."""
    missed = [why for case in cases for why in case.missed(cloud)]
    assert not missed, "these conductors did not die at their target:\n" \
        + "\n".join(missed) + "\n" + cloud.log_tail(
            names={f"{stage}-{c.index}" for c in cases if c.missed(cloud)
                   for stage in ("first", "doomed")})
    wrong = _rebuilt_hosts_destroyed_their_copies(cloud)
    assert not wrong, "\n".join(wrong)
    cloud.back_in_service()
    problems = cloud.problems()
    assert not problems, "\n".join(problems[:20])
    report = assert_audit_clean(*cloud.audit_args())
    assert report.counts["instances"] == len(cases) * COUNT


@pytest.mark.slow
@pytest.mark.parametrize("half", [0, 1])
def test_kill_at_every_atom_boundary_of_a_5_server_evacuation(
        half, boundaries, evacuation_cloud_factory, evacuation_harness, assert_audit_clean):
    # Every other boundary each: the longest test of the suite (every boundary under
    # fleetflow's engine) in two that two workers can run at once, covering the same plan.
    plan = boundaries(crash_plan(evacuation_harness.flow_atoms))[half::2]
    own = sum(1 for case in plan if case.get("revert") == "confirm")
    cloud = evacuation_cloud_factory(sources=len(plan),
                                     targets=SHARED_TARGETS + own * OWN_TARGETS)
    cases = []
    for index, kwargs in enumerate(plan):
        if kwargs.get("revert") == "confirm":
            kwargs = dict(kwargs, targets=cloud.dedicated_targets(OWN_TARGETS))
        cases.append(evacuation_harness.EvacuationCase(index, count=COUNT,
                                                       **{"lanes": LANES, **kwargs}))
    started = time.monotonic()
    evacuation_harness.run_evacuation_cases(cloud, cases, parallel=PARALLEL)
    print(f"{len(cases)} cases ({sum(c.revert is not None for c in cases)} reverting), "
          f"{PARALLEL} at a time: {time.monotonic() - started:.0f} s")
    _assert_died_where_planned_and_recovered(cloud, cases, assert_audit_clean)


@pytest.mark.slow
def test_kill_inside_the_groups_of_a_5_server_evacuation(
        boundaries, evacuation_cloud_factory, evacuation_harness, assert_audit_clean):
    plan = boundaries(grouped_crash_plan(evacuation_harness.flow_atoms))
    cloud = evacuation_cloud_factory(sources=len(plan), targets=SHARED_TARGETS)
    cloud.conf.set_override("instances_per_atom", GROUPED, group="conductor")
    cases = [evacuation_harness.EvacuationCase(index, count=COUNT, **kwargs)
             for index, kwargs in enumerate(plan)]
    evacuation_harness.run_evacuation_cases(cloud, cases, parallel=PARALLEL)
    # Each conductor died at a group's target: the flow ran in groups.
    _assert_died_where_planned_and_recovered(cloud, cases, assert_audit_clean)


@pytest.mark.slow
def test_random_kills_in_100_server_evacuations(random_kills, evacuation_cloud_factory,
                                                assert_audit_clean):
    cloud = evacuation_cloud_factory(sources=40, targets=6, vcpus=512,
                                     live_migrate_seconds=0.05, migrate_seconds=0.05)
    seed = int(os.environ.get("FLEETFLOW_TEST_SEED", "0")) or random.randrange(1 << 30)
    print(f"seed {seed}")  # shown with the output of a failure: set it to replay
    rng = random.Random(seed)
    modes = itertools.cycle((states.MODE_LIVE, states.MODE_REBUILD, states.MODE_COLD))
    started = time.monotonic()
    live = [cloud.spawn(f"random-{n}") for n in range(3)]
    kills, spawned = 0, 3
    while kills < random_kills:
        # Keep 100-server evacuations on the board so kills land in them.
        while len(cloud.unsettled()) < 3:
            cloud.evacuate(next(modes), 100)
        # Kill only a conductor that holds an evacuation's job (a kill of an
        # idle one tests nothing), at a random moment of its work.
        time.sleep(rng.uniform(0.2, 1.5))
        owners = cloud.owners()
        working = [p for p in live if f"{p.name}-0" in owners]
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
    ran = time.monotonic() - started
    wrong = _rebuilt_hosts_destroyed_their_copies(cloud)
    assert not wrong, f"seed {seed}\n" + "\n".join(wrong)
    problems = cloud.problems()
    assert not problems, f"seed {seed}\n" + "\n".join(problems[:20])
    report = assert_audit_clean(*cloud.audit_args())
    assert report.counts["instances"] == 100 * len(cloud.evacuations)
    posted = {e["mode"] for e in cloud.evacuations.values()}
    print(f"{kills} kills over {len(cloud.evacuations)} evacuations of 100 "
          f"({', '.join(sorted(posted))}) in {ran:.0f} s")
