"""kill -9 of conductors running the real vcluster flows; another one finishes.

Conductors are real ``fleetflow conductor`` subprocesses on the SQL jobboard
(embedded mode: SQLite, the simulated hosts and their storage served
in-process by each conductor from one shared state file). Clusters are
created and deleted the way the API does it (services/vclusters.py). See
tests/reliability/vcluster_cloud.py for the cloud and its lanes.

1. Every atom boundary of a cluster of two servers and two volumes (each
   server affine with its volume, the servers anti-affine and the volumes
   anti-affine): one cluster per (atom, crash point), each on a
   board of its own, so the conductor that carries the crash target dies
   exactly there; a survivor finishes it. Then the during-revert point of
   every atom that undoes something, in runs made to revert:

   - every boot fails (``nohost`` lane): each server's chain reverts its boot
     on every candidate, then the whole run reverts: the volumes created
     meanwhile, the one claim, the retries, the lifecycle (REVERTED);
   - every volume create fails (``nodisk`` lane): the volumes' chains revert
     their failed creates, and the whole run reverts the servers booted;
   - an attach, which reverts only when it fails itself (``finish`` after
     it writes one row and cannot fail): a first conductor dies just before
     the attach, db-server-2's host dies, a second conductor's attach
     attaches db-vol-1, fails on db-vol-2 and reverts (and dies); the host
     is back for the survivor, which reverts the whole run.

   Which server (or volume) fails first is up to the parallel engine, so
   those targets name the atom of both and the first one reached fires. A
   few crashes on the way to those reverts too: after the one claim, before
   a boot (a create) that will fail, after a retry chose (and claimed) a
   candidate. The schedule and ``finish`` have no revert of their own (a
   member's retry claims an alternate on its way, replacing the member's
   allocation, and the one claim's revert releases it).

   Then the teardown (delete) of that cluster, every atom at every
   boundary; it is never reverted (an operator resumes a stopped one).
2. At least 20 kills (FLEETFLOW_TEST_RANDOM_KILLS, default 20; half under stock) at random
   moments of conductors building 50-server + 50-volume clusters (each server
   affine with its own volume, which attaches it; servers anti-affine per
   host in groups of ten, their volumes on ten different backends; boots
   lasting 0.2 s), every other one built in groups of 40 members (one task a
   group), then at least half as many while they are deleted; a new
   conductor replaces each one killed.

In the end every cluster is ACTIVE or REVERTED as planned (DELETED once
deleted) and the strict audit is clean; no server was spawned twice (exactly
once when ACTIVE), no volume created twice; an ACTIVE cluster holds every
grouping, each server holding its flavor on its host only and each volume
its size on its backend only, live there and attached to its server; a
REVERTED or DELETED one has no guest, no live volume, no allocation and no
server group left. See ``VClusterCloud.problems``.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from fleetflow.common import states
from fleetflow.flows.tasks.base import (
    AFTER_CHECKPOINT,
    AFTER_EFFECT,
    BEFORE_EXECUTE,
    DURING_REVERT,
)
from fleetflow.flows.vcluster.build import build_flow
from fleetflow.flows.vcluster.teardown import teardown_flow

MEMBERS = 2  # servers, and volumes, of the cluster every boundary case builds
BOUNDARIES = (BEFORE_EXECUTE, AFTER_EFFECT, AFTER_CHECKPOINT)
# Cases at once: each spends most of its time waiting for a dead conductor's
# claim to expire, so more run than there are cores.
PARALLEL = 16
BIG = 50
# Members a task of the clusters built in groups.
GROUPED = 40


def cluster_flows() -> tuple:
    """The two-server cluster's build and teardown flows, as a conductor rebuilds them."""
    servers = [{"index": i, "name": f"db-server-{i + 1}", "id": f"srv-{i}",
                "resources": {"VCPU": 1}, "image_id": "img"} for i in range(MEMBERS)]
    volumes = [{"index": i, "name": f"db-vol-{i + 1}", "id": f"vol-{i}", "size_gb": 10}
               for i in range(MEMBERS)]
    return (build_flow("enumerate", states.RUN_CREATE, servers, volumes),
            teardown_flow("enumerate", states.RUN_DELETE, servers, volumes))


def reverting(flow, atoms: list[tuple[str, str]]) -> set[str]:
    """The atoms of ``flow`` with a revert of their own (where during-revert fires)."""
    found, stack = {}, [flow]
    while stack:
        node = stack.pop()
        if getattr(node, "retry", None) is not None:
            found[node.retry.name] = node.retry
        for child, _meta in node.iter_nodes() if hasattr(node, "iter_nodes") else ():
            stack.append(child)
            found[child.name] = child
    return {name for name, _ in atoms
            if hasattr(getattr(type(found[name]), "revert", None), "__wrapped__")}


def both(kind: str, step: str, point: str = DURING_REVERT) -> str:
    """A target naming ``step`` of both servers (or volumes): the first reached fires."""
    return ",".join(f"{kind}-{i:04d}-{step}:{point}" for i in range(MEMBERS))


def crash_plan(flow_atoms) -> list[dict]:
    """Keyword arguments of one VClusterCase each."""
    from vcluster_cloud import ATTACH, NODISK, NOHOST

    build, teardown = (flow_atoms(f) for f in cluster_flows())
    plan = [{"target": f"{name}:{point}"} for name, _ in build for point in BOUNDARIES]
    lifecycle = [f"{name}:{DURING_REVERT}"
                 for name in ("vcluster-lifecycle", "schedule-retry", "claim-all")]
    plan += [{"lane": NOHOST, "target": target} for target in (
        both("srv", "boot"), both("srv", "retry"), both("vol", "create"),
        both("vol", "retry"), *lifecycle)]
    plan += [{"lane": NODISK, "target": target} for target in (
        both("srv", "boot"), both("vol", "create"), both("srv", "retry"),
        lifecycle[0], lifecycle[2])]
    # Crashes on the way to a revert: after the one claim of a run whose
    # members all fail, before a boot (or create) that will fail, after a
    # server's retry chose its candidate.
    plan += [{"lane": NOHOST, "target": target} for target in (
        f"claim-all:{AFTER_EFFECT}", both("srv", "boot", BEFORE_EXECUTE),
        both("srv", "retry", AFTER_CHECKPOINT))]
    plan.append({"lane": NODISK, "target": both("vol", "create", BEFORE_EXECUTE)})
    plan.append({"lane": ATTACH, "target": f"attach:{DURING_REVERT}",
                 "prelude": f"attach:{BEFORE_EXECUTE}"})
    plan += [{"target": f"{name}:{point}", "delete": True}
             for name, _ in teardown for point in BOUNDARIES]
    return plan


def test_the_plan_covers_every_atom_of_both_flows(vcluster_harness):
    from test_provision_crash import flow_atoms

    build, teardown = cluster_flows()
    build_atoms, teardown_atoms = flow_atoms(build), flow_atoms(teardown)
    names = {name for name, _ in build_atoms}
    for kind, steps in (("srv", ("retry", "boot")), ("vol", ("retry", "create"))):
        assert {f"{kind}-{i:04d}-{step}" for i in range(MEMBERS) for step in steps} \
            <= names
    assert {"vcluster-lifecycle", "schedule-retry", "schedule", "claim-all", "attach",
            "finish"} <= names
    assert {"detach", "release", "finish-teardown"} <= {name for name, _ in teardown_atoms}
    plan = crash_plan(flow_atoms)
    targets = [t for case in plan for t in case["target"].split(",")]
    for atoms, delete in ((build_atoms, False), (teardown_atoms, True)):
        wanted = {f"{name}:{point}" for name, _ in atoms for point in BOUNDARIES}
        assert wanted <= {t for case in plan if bool(case.get("delete")) == delete
                          for t in case["target"].split(",")}
    assert {t.rsplit(":", 1)[0] for t in targets if t.endswith(DURING_REVERT)} \
        == reverting(build, build_atoms) == {
            "vcluster-lifecycle", "schedule-retry", "claim-all", "attach",
            *(f"{kind}-{i:04d}-{step}" for i in range(MEMBERS)
              for kind, step in (("srv", "retry"), ("srv", "boot"), ("vol", "retry"),
                                 ("vol", "create")))}
    assert not reverting(teardown, teardown_atoms)


class VClusterCase:
    """One cluster of two servers apart with their volumes, on a board of its own; a
    conductor doomed to die at ``target``, then a survivor that finishes it.

    ``delete``: the doomed conductor builds the cluster, then its teardown is
    posted, where the target is. ``prelude`` (the attach lane): a first
    doomed conductor dies there, db-server-2's host dies, then the conductor
    doomed to die at ``target`` runs; the host is back for the survivor.
    """

    def __init__(self, index: int, target: str, lane: str = "good", delete: bool = False,
                 prelude: str | None = None):
        self.index, self.target, self.lane = index, target, lane
        self.delete, self.prelude = delete, prelude
        self.board = f"vc-case-{index}"
        self.vcluster_id: str | None = None
        self.first = self.doomed = self.survivor = None
        self.codes: dict[str, int | None] = {}
        self.dead_host: str | None = None
        self.deleting = self.done = False
        self.stage = "first" if prelude else "doomed"

    def __repr__(self) -> str:
        return f"case {self.index} ({self.lane}, {'delete' if self.delete else 'build'}, " \
               f"{self.target})"

    def start(self, cloud) -> None:
        from vcluster_cloud import two_servers_apart

        self.vcluster_id = cloud.create(two_servers_apart(self.lane), board=self.board,
                                        lane=self.lane)
        if self.prelude:
            self.first = cloud.spawn(f"first-{self.index}", board=self.board,
                                     crash_at=self.prelude)
        else:
            self.doomed = cloud.spawn(f"doomed-{self.index}", board=self.board,
                                      crash_at=self.target)

    def advance(self, cloud) -> None:
        vid = self.vcluster_id
        if self.stage == "first":
            self.codes["first"] = self.first.poll()
            if self.codes["first"] is not None:
                self.dead_host = next(m["host"] for m in cloud.view(vid)["instances"]
                                      if m["name"] == "db-server-2")
                cloud.set_dead(self.dead_host, True)
                self.doomed = cloud.spawn(f"doomed-{self.index}", board=self.board,
                                          crash_at=self.target)
                self.stage = "doomed"
            elif cloud.settled(vid):
                self.codes["first"] = _stop(self.first)
                self.done = True
            return
        if self.stage == "doomed":
            if self.delete and not self.deleting:
                if cloud.settled(vid):  # built: the target is in its teardown
                    if cloud.status(vid) != states.ACTIVE:
                        self.codes["doomed"] = _stop(self.doomed)
                        self.done = True  # problems() names what went wrong
                        return
                    cloud.delete(vid)
                    self.deleting = True
                return
            self.codes["doomed"] = self.doomed.poll()
            if self.codes["doomed"] is not None:
                if self.dead_host:
                    cloud.set_dead(self.dead_host, False)
                self.survivor = cloud.spawn(f"survivor-{self.index}", board=self.board)
                self.stage = "survivor"
            elif cloud.settled(vid):
                # The target never fired: the doomed conductor finished the work.
                self.codes["doomed"] = _stop(self.doomed)
                self.done = True
            return
        if cloud.settled(vid):
            self.survivor.terminate()  # idle now; stop_all() reaps it
            self.done = True

    def missed(self, cloud) -> list[str]:
        """Why the doomed conductors did not die where planned (empty when they did)."""
        checks = [("doomed", self.target)]
        if self.prelude:
            checks.insert(0, ("first", self.prelude))
        why = []
        for stage, target in checks:
            fired = log_fired(cloud, f"{stage}-{self.index}")
            code = self.codes.get(stage)
            if code != -signal.SIGKILL or fired not in target.split(","):
                why.append(f"{self!r}: {stage} conductor ended {code}, fired at {fired}")
        return why


def log_fired(cloud, name: str) -> str | None:
    """The ``atom:point`` at which conductor ``name`` killed itself (from its log)."""
    path = os.path.join(cloud.workdir, f"conductor-{name}.log")
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as fh:
        for line in fh:
            if "crash point " in line and " reached" in line:
                return line.split("crash point ", 1)[1].split(" reached", 1)[0]
    return None


def _stop(proc) -> int:
    from provision_cloud import stop_process  # the harnesses' directory is on sys.path by now

    return stop_process(proc)


@pytest.mark.slow
def test_kill_at_every_atom_boundary_of_two_servers_apart_with_their_volumes(
        boundaries, vcluster_cloud_factory, vcluster_harness, assert_audit_clean):
    from test_provision_crash import flow_atoms

    h = vcluster_harness
    plan = boundaries(crash_plan(flow_atoms))
    cloud = vcluster_cloud_factory(lanes={h.GOOD: (2, 4), h.NOHOST: (2, 2),
                                          h.NODISK: (2, 2), h.ATTACH: (2, 2)})
    cloud.break_lanes()
    cases = [VClusterCase(index, **kwargs) for index, kwargs in enumerate(plan)]
    started = time.monotonic()
    h.provision_cloud.run_staged_cases(cloud, cases, parallel=PARALLEL)
    print(f"{len(cases)} cases, {PARALLEL} at a time: {time.monotonic() - started:.0f} s")
    missed = [why for case in cases for why in case.missed(cloud)]
    assert not missed, "these conductors did not die at their target:\n" \
        + "\n".join(missed) + "\n" + cloud.log_tail(
            names={f"{stage}-{c.index}" for c in cases if c.missed(cloud)
                   for stage in ("first", "doomed")})
    cloud.mend_lanes()
    problems = cloud.problems()
    assert not problems, "\n".join(problems[:20])
    report = assert_audit_clean(*cloud.audit_args())
    assert report.counts["instances"] == len(cases) * MEMBERS


def big_cluster(lane: str) -> dict:
    """BIG servers, each affine with its own volume (so attached to it); servers
    anti-affine per host in groups of ten, their volumes per backend (the
    default scope of volumes, the rack, would need ten racks)."""
    from vcluster_cloud import grouping, server, volume

    instances, groupings = [], []
    for i in range(BIG):
        instances += [server(f"s{i:02d}", lane), volume(f"v{i:02d}", size=1)]
        groupings.append(grouping(f"pair-{i:02d}", [f"s{i:02d}", f"v{i:02d}"], "affinity"))
    for g in range(BIG // 10):
        tens = range(10 * g, 10 * g + 10)
        groupings += [grouping(f"spread-{g}", [f"s{i:02d}" for i in tens], "anti-affinity",
                               "host"),
                      grouping(f"disks-{g}", [f"v{i:02d}" for i in tens], "anti-affinity",
                               "backend")]
    return {"instances": instances, "groupings": groupings}


def run_kinds(cloud) -> dict[str, str]:
    """``{flow id: "build" | "delete"}`` of every run of every cluster."""
    return {flow_id: ("build" if n == 0 else "delete")
            for record in cloud.vclusters.values()
            for n, flow_id in enumerate(record["flow_ids"])}


@pytest.mark.slow
def test_random_kills_while_50_server_clusters_are_built_and_deleted(
        random_kills, vcluster_cloud_factory, vcluster_harness, assert_audit_clean):
    h = vcluster_harness
    cloud = vcluster_cloud_factory(lanes={h.GOOD: (4, 8)}, boot_seconds=0.2)
    seed = int(os.environ.get("FLEETFLOW_TEST_SEED", "0")) or random.randrange(1 << 30)
    print(f"seed {seed}")  # shown with the output of a failure: set it to replay
    rng = random.Random(seed)
    started = time.monotonic()
    live = [cloud.spawn(f"random-{n}") for n in range(3)]
    kills = {"build": 0, "delete": 0}
    shapes = {"chains": 0, "groups": 0}
    wanted = {"build": random_kills, "delete": max(1, random_kills // 2)}
    deleted: set[str] = set()
    spawned = len(live)
    while True:
        if time.monotonic() - started > 300:
            raise AssertionError(f"seed {seed}: {kills} kills after 300 s; unsettled "
                                 f"{cloud.unsettled()}\n" + cloud.log_tail())
        for vid in [v for v in cloud.vclusters if v not in deleted and cloud.settled(v)]:
            cloud.delete(vid)  # each built cluster is deleted at once
            deleted.add(vid)
        short = {run for run in kills if kills[run] < wanted[run]}
        unsettled = cloud.unsettled()
        if not short and not unsettled:
            break
        # Two runs under way at a time, so kills land in them.
        if short and len(unsettled) < 2:
            # Every other cluster built in groups of 40 members (flows/vcluster/batch.py).
            grouped = len(cloud.vclusters) % 2 == 1
            shapes["groups" if grouped else "chains"] += 1
            cloud.conf.set_override("instances_per_atom", GROUPED if grouped else 2 * BIG,
                                    group="conductor")
            cloud.create(big_cluster(h.GOOD), name=f"big-{len(cloud.vclusters)}",
                         expected=h.BUILT)
        # Kill only a conductor that holds a run still short of kills (a kill
        # of an idle one tests nothing), at a random moment of its work.
        time.sleep(rng.uniform(0.2, 1.2))
        holding, kinds = cloud.holders(), run_kinds(cloud)
        working = [p for p in live if kinds.get(holding.get(f"{p.name}-0")) in short]
        if not working:
            continue
        victim = rng.choice(working)
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait(30) == -signal.SIGKILL
        kills[kinds[holding[f"{victim.name}-0"]]] += 1
        live.remove(victim)
        live.append(cloud.spawn(f"random-{spawned}"))
        spawned += 1
    ran = time.monotonic() - started
    problems = cloud.problems()
    assert not problems, f"seed {seed}\n" + "\n".join(problems[:20])
    report = assert_audit_clean(*cloud.audit_args())
    assert report.counts["instances"] == BIG * len(cloud.vclusters)
    assert shapes["groups"] >= 1 or len(cloud.vclusters) < 2, shapes
    print(f"{kills} kills over {len(cloud.vclusters)} clusters of {BIG}+{BIG} ({shapes}) "
          f"in {ran:.0f} s")
