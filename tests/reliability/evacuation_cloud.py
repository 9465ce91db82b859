"""A real evacuate-flow cloud whose conductors are killable subprocesses.

Not a test module: tests/reliability/conftest.py hands it out through fixtures.

Built on provision_cloud.ProvisionCloud (database, fleet, SQL jobboards,
forked ``fleetflow conductor`` processes serving the simulated hosts from one
shared state file), with its two racks put to other uses:

- ``bad`` hosts are the *sources*: each evacuation takes one of its own,
  where servers are made consistently first (row, placement claim, guest);
  nothing there is booked behind placement's back here;
- ``good`` hosts are the *targets*: every evacuation names them as its
  ``target_hosts``, so no server ever lands on another evacuation's source.

Evacuations are created the way the API creates them
(services/evacuations.py ``EvacuationOps``, with the host operations of
services/hosts.py to kill a host and set it down), each posted on the board
the caller names: the evacuate flow's atom names are the same in every
evacuation, so a crash target (``FLEETFLOW_CRASH_AT``) singles out one
evacuation only when the doomed conductor sees no other job.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

import sqlalchemy as sa
from provision_cloud import (  # this directory is on sys.path (conftest, PYTHONPATH)
    BAD,
    FLOW_DONE,
    GOOD,
    CrashCase,
    PreloadingForkServer,
    ProvisionCloud,
    run_staged_cases,
    stop_process,
)
from test_provision_crash import flow_atoms  # noqa: F401  (the same enumeration, re-exported)

from fleetflow.common import ids, states

TENANT = "evac-tenant"
FLAVOR_ID = "1"  # provision_cloud's m1.tiny
IMAGE_ID = "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01"
# Evacuation statuses after which nothing moves any more without an operator.
AT_REST = states.EVACUATION_SETTLED | {states.PAUSED}
EXTRA_PRELOAD = ("fleetflow.flows.evacuate", "fleetflow.scheduler.moves.place")


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    """``os.environ`` with ``values`` for the duration: ProvisionCloud builds its
    configuration (and its conductors' environment) from a copy of it."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class EvacuationCloud(ProvisionCloud):
    """ProvisionCloud with source and target hosts, and evacuations instead of reservations.

    ``status``, ``flow_state``, ``settled``, ``unsettled`` and
    ``wait_settled`` are keyed by evacuation id here.
    """

    def __init__(self, workdir, sources: int, targets: int, vcpus: int = 256,
                 live_migrate_seconds: float = 0.0, migrate_seconds: float = 0.0,
                 agent_threads: int = 16, **kwargs):
        import fleetflow.flows.evacuate  # noqa: F401  (registers the flow to post)
        from fleetflow.services.hosts import HostOps

        settings = {
            "FLEETFLOW_COMPUTE_LIVE_MIGRATE_SECONDS": str(live_migrate_seconds),
            "FLEETFLOW_COMPUTE_MIGRATE_SECONDS": str(migrate_seconds),
            # Unset, every process serving a few hundred hosts would start one
            # RPC thread per build slot of each (capped at 2048); evacuations
            # build nothing, and a conductor makes a handful of calls at once.
            "FLEETFLOW_COMPUTE_AGENT_THREADS": str(agent_threads),
        }
        with _environ(settings):
            super().__init__(workdir, good_hosts=targets, bad_hosts=sources, vcpus=vcpus,
                             **kwargs)
        # A fork server that has the evacuate flow loaded too: each of the
        # hundreds of conductors would import it again otherwise.
        self.forkserver.close()
        self.forkserver = EvacuationForkServer(self.env)
        self.targets = list(self.hosts[GOOD])
        self.free_sources = list(self.hosts[BAD])
        self.host_ops = HostOps(self.conf, self.database,
                                getattr(self.placement, "store", None), self.compute)
        with self.database.session() as session:
            from fleetflow.persistence.models import Flavor

            self.resources = dict(session.get(Flavor, FLAVOR_ID).resources)
        # evacuation id -> {"board", "flow_id", "mode", "source", "servers",
        #   "expected": DONE or FAILED, "fault_code": why FAILED,
        #   "completed_moves": {uuid: completed moves, when not the usual},
        #   "tries": {uuid: tries, when not the usual}, or None: not foreseeable}
        self.evacuations: dict[str, dict] = {}
        self.revived: dict[str, list[str]] = {}
        self._settled: set[str] = set()

    # -- servers and hosts -------------------------------------------------------
    def take_source(self) -> str:
        if not self.free_sources:
            raise AssertionError("every source host is used: make the cloud bigger")
        return self.free_sources.pop(0)

    def dedicated_targets(self, count: int) -> list[str]:
        """``count`` targets taken out of the shared ones, for one evacuation to use alone
        (call before any evacuation is made: the shared ones are every evacuation's)."""
        if count >= len(self.targets):
            raise AssertionError("not enough target hosts: make the cloud bigger")
        taken, self.targets = self.targets[-count:], self.targets[:-count]
        return taken

    def boot(self, host: str, count: int) -> list[str]:
        """``count`` ACTIVE servers made consistently on ``host``: rows, one claim, guests."""
        from fleetflow.persistence.fleet import stable_uuid
        from fleetflow.persistence.models import Instance

        uuids = [ids.new_uuid() for _ in range(count)]
        with self.database.session() as session:
            for uuid in uuids:
                session.add(Instance(id=uuid, tenant_id=TENANT, name=f"vm-{uuid[:8]}",
                                     host=host, status=states.ACTIVE, flavor_id=FLAVOR_ID,
                                     image_id=IMAGE_ID))
        provider = stable_uuid(host)
        self.placement.claim_many({uuid: {provider: self.resources} for uuid in uuids},
                                  TENANT, TENANT)
        for uuid in uuids:
            self.driver.build_instance(host, uuid, self.resources, image=IMAGE_ID)
        return uuids

    def kill(self, host: str) -> None:
        """The host dies (every process sees it) and an operator sets it down."""
        self.host_ops.simulate(host, dead=True)
        self.host_ops.set_state(host, states.HOST_DOWN, reason="dead")

    def revive(self, host: str) -> list[str]:
        """Bring a dead host back; returns the copies it destroyed (rebuilt elsewhere)."""
        view = self.host_ops.simulate(host, dead=False)
        self.revived[host] = sorted(view["faults"].get("destroyed_copies") or [])
        return self.revived[host]

    def revive_rebuild_sources(self) -> dict[str, list[str]]:
        """Bring back every host a rebuild evacuated: ``{host: copies it destroyed}``."""
        for evacuation in self.evacuations.values():
            if evacuation["mode"] == states.MODE_REBUILD and \
                    evacuation["source"] not in self.revived:
                self.revive(evacuation["source"])
        return {e["source"]: self.revived[e["source"]] for e in self.evacuations.values()
                if e["mode"] == states.MODE_REBUILD}

    def back_in_service(self) -> None:
        """An operator sets every host a failed rebuild fenced ``up`` again (its servers
        never left, and the audit calls servers on a down host nobody moves stranded)."""
        for evacuation in self.evacuations.values():
            if evacuation["mode"] == states.MODE_REBUILD and \
                    evacuation["expected"] != states.DONE:
                self.host_ops.set_state(evacuation["source"], states.HOST_UP,
                                        reason="back in service")

    def set_fail_move(self, host: str, uuids: list[str], fail: bool) -> None:
        for uuid in uuids:
            self.compute.set_server_faults(host, uuid, fail_move=fail)

    # -- evacuations ---------------------------------------------------------------
    def ops(self, board: str | None = None):
        from fleetflow.engine.submit import Submitter
        from fleetflow.services.evacuations import EvacuationOps

        return EvacuationOps(self.conf, self.database,
                             submit=Submitter(self.board(board), self.backend),
                             compute=self.compute, on_host_state=self.host_ops.sync_placement)

    def evacuate(self, mode: str, count: int, board: str | None = None, lanes: int = 8,
                 targets: list[str] | None = None) -> str:
        """A source host with ``count`` servers (killed first for a rebuild), evacuated
        onto ``targets`` (the cloud's targets when None); the job posted on ``board``."""
        from fleetflow.services.evacuations import EvacuationRequest

        source = self.take_source()
        servers = self.boot(source, count)
        if mode == states.MODE_REBUILD:
            self.kill(source)
        view = self.ops(board).evacuate(EvacuationRequest(
            hosts=[source], mode=mode, max_parallel=lanes,
            target_hosts=list(targets or self.targets), user_id="crash-operator"))
        self.evacuations[view["id"]] = {
            "board": board, "flow_id": view["flow_id"], "mode": mode, "source": source,
            "servers": servers, "expected": states.DONE, "fault_code": None,
            "completed_moves": {}, "tries": {}}
        return view["id"]

    def moves(self, evacuation_id: str) -> list:
        from fleetflow.persistence import evacuations as evac_rows

        with self.database.session() as session:
            found = evac_rows.moves(session, evacuation_id)
            session.expunge_all()
        return found

    # -- states --------------------------------------------------------------------
    def flow_state(self, evacuation_id: str) -> str:
        from fleetflow.engine.submit import load_status

        return load_status(self.backend, self.evacuations[evacuation_id]["flow_id"])["state"]

    def status(self, evacuation_id: str) -> str:
        from fleetflow.persistence import evacuations as evac_rows

        with self.database.session() as session:
            return evac_rows.get(session, evacuation_id).status

    def settled(self, evacuation_id: str) -> bool:
        """Its flow ended (or failed for good) and, unless it failed, its row says so too."""
        if evacuation_id in self._settled:
            return True  # nothing here resumes a flow that ended
        if self.status(evacuation_id) in AT_REST:
            done = self.flow_state(evacuation_id) in FLOW_DONE
        else:
            done = self.flow_state(evacuation_id) == "FAILURE"
        if done:
            self._settled.add(evacuation_id)
        return done

    def unsettled(self) -> list[str]:
        return [e for e in self.evacuations if not self.settled(e)]

    def wait_settled(self, timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            left = self.unsettled()
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    "evacuations not settled: "
                    + ", ".join(f"{e} {self.status(e)}/{self.flow_state(e)}" for e in left)
                    + "\n" + self.log_tail())
            time.sleep(0.2)

    # -- the invariants ------------------------------------------------------------
    def copies(self) -> dict[str, list[tuple[str, str]]]:
        """Every guest of every host: ``{uuid: [(host, state), ...]}`` (hosts must be alive)."""
        found: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for host in self.driver.hosts:
            for guest in self.driver.list_instances(host):
                found[guest["uuid"]].append((host, guest["state"]))
        return found

    def problems(self) -> list[str]:
        """What breaks the rules, per evacuation, by its planned outcome (``expected``).

        DONE: flow SUCCESS; every server's move DONE, its row ACTIVE and idle
        on the move's destination, not its source. FAILED (a rebuild whose
        host answered again before the flow ran): flow REVERTED, the fault
        recorded is the planned one, no server moved: each still ACTIVE and
        idle on its source, its move not DONE.

        Either way the source is released, and each server has one guest in
        the whole cloud, ACTIVE, on the host its row names; allocations only
        there; no migration consumer of any of its tries left; as many
        completed moves as planned (DONE: one, plus any completed try that was
        undone on purpose; FAILED: none), and as many tries (and hosts tried)
        as planned: a try re-run after a crash counts once.
        """
        from fleetflow.persistence import evacuations as evac_rows
        from fleetflow.persistence.fleet import stable_uuid
        from fleetflow.persistence.models import Evacuation, Host, Instance

        copies = self.copies()
        found = []
        for eid, evacuation in self.evacuations.items():
            wanted, source = evacuation["expected"], evacuation["source"]
            done = wanted == states.DONE
            flow_wanted = "SUCCESS" if done else "REVERTED"
            status, flow = self.status(eid), self.flow_state(eid)
            if (status, flow) != (wanted, flow_wanted):
                found.append(f"evacuation {eid}: {status}/{flow}, not {wanted}/{flow_wanted}")
            moves = {m.instance_id: m for m in self.moves(eid)}
            with self.database.session() as session:
                fault = session.get(Evacuation, eid).fault
                holder = session.execute(sa.select(Host.evacuation_id).where(
                    Host.name == source)).scalar()
                rows = {i.id: (i.status, i.task_state, i.host) for i in session.scalars(
                    sa.select(Instance).where(Instance.id.in_(evacuation["servers"])))}
            if not done and (fault or {}).get("code") != evacuation["fault_code"]:
                found.append(f"evacuation {eid}: fault {fault}, not "
                             f"{evacuation['fault_code']}")
            if holder is not None:
                found.append(f"evacuation {eid}: source {source} still held by {holder}")
            if sorted(moves) != sorted(evacuation["servers"]):
                found.append(f"evacuation {eid}: moves for {sorted(moves)}, servers "
                             f"{sorted(evacuation['servers'])}")
            for uuid in evacuation["servers"]:
                move = moves.get(uuid)
                if move is None:
                    continue
                row_status, task_state, host = rows.get(uuid, (None, None, None))
                guests = copies.get(uuid, [])
                allocations = self.placement.get_allocations(uuid).allocations
                leftovers = {}
                for attempt in range(move.attempts + 1):
                    migration = evac_rows.migration_id_for(eid, uuid, attempt)
                    held = self.placement.get_allocations(migration).allocations
                    if held:
                        leftovers[migration] = held
                completed = self.driver.move_count(uuid)
                planned = evacuation["completed_moves"].get(uuid, int(done))
                tries = (None if evacuation["tries"] is None
                         else evacuation["tries"].get(uuid, int(done)))
                if done:
                    moved = (move.status == states.DONE and host == move.destination
                             and host != source)
                else:
                    moved = move.status != states.DONE and host == source
                ok = (moved and row_status == states.ACTIVE and task_state is None
                      and guests == [(host, states.ACTIVE)]
                      and allocations == {stable_uuid(host): self.resources}
                      and not leftovers and completed == planned
                      and (tries is None or tries == move.attempts == len(move.hosts_tried)))
                if not ok:
                    found.append(
                        f"evacuation {eid} ({evacuation['mode']}, {wanted}) server {uuid}: "
                        f"move {move.status} to {move.destination} (attempts "
                        f"{move.attempts}, tried {move.hosts_tried}); row "
                        f"{row_status}/{task_state} on {host}; guests {guests}; allocations "
                        f"{allocations}; migration consumers left {leftovers}; completed "
                        f"moves {completed}, planned {planned}; tries planned {tries}")
        return found


class EvacuationCase(CrashCase):
    """One evacuation of ``count`` servers on a board of its own; a conductor doomed
    to die at ``target``, then a survivor that finishes it.

    ``revert`` makes the doomed conductor revert something first:

    - ``"fail"``: every server's move fails at its switch-over (its server
      fault), so each chain reverts its move and its claim; the fault is
      cleared once the doomed conductor is dead, and the survivor's retries
      move the servers elsewhere;
    - ``"confirm"``: a first doomed conductor dies just before a confirm
      (``prelude``); the destination of that server then dies, and a second
      doomed conductor's confirm fails there, reverting the chain's attach;
      the destination is back before the survivor starts, which undoes the
      completed move and moves the server elsewhere. One lane, so no other
      move is under way towards the host that dies, and the cloud's other
      evacuations never see it (the case has targets of its own);
    - ``"alive"`` (rebuild): the dead source answers again after the
      evacuation was accepted and before any conductor ran it; the flow's
      host check fails it and the whole flow reverts (the lifecycle marker
      writes FAILED); its servers stay where they are.
    """

    def __init__(self, index: int, mode: str, target: str, count: int = 5, lanes: int = 5,
                 revert: str | None = None, prelude: str | None = None,
                 targets: list[str] | None = None):
        super().__init__(index, target, mode, count)
        self.mode, self.lanes, self.revert, self.prelude = mode, lanes, revert, prelude
        self.targets = targets
        self.evacuation_id: str | None = None
        self.first = None  # the prelude's conductor
        self.first_code: int | None = None
        self.dead_destination: str | None = None
        self.stage = "first" if prelude else "doomed"

    def __repr__(self) -> str:
        return f"case {self.index} ({self.mode}, {self.revert or '-'}, {self.target})"

    def log_fired(self, cloud: EvacuationCloud, name: str) -> str | None:
        """The ``atom:point`` at which conductor ``name`` killed itself (from its log)."""
        path = os.path.join(cloud.workdir, f"conductor-{name}.log")
        with open(path, errors="replace") as fh:
            for line in fh:
                if "crash point " in line and " reached" in line:
                    return line.split("crash point ", 1)[1].split(" reached", 1)[0]
        return None

    def missed(self, cloud: EvacuationCloud) -> list[str]:
        """Why the doomed conductors did not die where planned (empty when they did)."""
        why = []
        checks = [("doomed", self.doomed_code, self.target)]
        if self.prelude:
            checks.insert(0, ("first", self.first_code, self.prelude))
        for stage, code, target in checks:
            fired = self.log_fired(cloud, f"{stage}-{self.index}")
            if code != -signal.SIGKILL or fired not in target.split(","):
                why.append(f"{self!r}: {stage} conductor ended {code}, fired at {fired}")
        return why

    def start(self, cloud: EvacuationCloud) -> None:
        self.evacuation_id = cloud.evacuate(self.mode, self.count, board=self.board,
                                            lanes=self.lanes, targets=self.targets)
        evacuation = cloud.evacuations[self.evacuation_id]
        if self.revert == "alive":
            cloud.revive(evacuation["source"])
            evacuation["expected"], evacuation["fault_code"] = states.FAILED, "HOST_ALIVE"
        if self.revert == "fail":
            cloud.set_fail_move(evacuation["source"], evacuation["servers"], True)
            # Whether a server's first move ends before or after the fault is
            # lifted is up to the timing of the kill.
            evacuation["tries"] = None
        if self.prelude:
            self.first = cloud.spawn(f"first-{self.index}", board=self.board,
                                     crash_at=self.prelude)
        else:
            self.doomed = cloud.spawn(f"doomed-{self.index}", board=self.board,
                                      crash_at=self.target)

    def advance(self, cloud: EvacuationCloud) -> None:
        if self.stage == "first":
            self.first_code = self.first.poll()
            if self.first_code is not None:
                self._kill_destination(cloud)
                self.doomed = cloud.spawn(f"doomed-{self.index}", board=self.board,
                                          crash_at=self.target)
                self.stage = "doomed"
            elif cloud.settled(self.evacuation_id):
                self.first_code = stop_process(self.first)
                self.done = True
            return
        if self.stage == "doomed":
            code = self.doomed.poll()
            if code is not None:
                self.doomed_code = code
                evacuation = cloud.evacuations[self.evacuation_id]
                if self.revert == "fail":
                    cloud.set_fail_move(evacuation["source"], evacuation["servers"], False)
                if self.dead_destination:
                    cloud.revive(self.dead_destination)
                self.survivor = cloud.spawn(f"survivor-{self.index}", board=self.board)
                self.stage = "survivor"
            elif cloud.settled(self.evacuation_id):
                # The target never fired: the doomed conductor finished the work.
                self.doomed_code = stop_process(self.doomed)
                self.done = True
            return
        if cloud.settled(self.evacuation_id):
            self.survivor.terminate()  # idle now; stop_all() reaps it
            self.done = True

    def _kill_destination(self, cloud: EvacuationCloud) -> None:
        """The destination of the server whose confirm the first conductor never ran dies."""
        fired = self.log_fired(cloud, f"first-{self.index}")
        if fired is None:
            return
        index = int(fired.split("-")[1])
        move = next(m for m in cloud.moves(self.evacuation_id) if m.index == index)
        self.dead_destination = move.destination
        cloud.host_ops.simulate(move.destination, dead=True)
        # That try completed a move before it was undone: two completed, one
        # effective, on the second host tried.
        evacuation = cloud.evacuations[self.evacuation_id]
        evacuation["completed_moves"][move.instance_id] = 2
        evacuation["tries"][move.instance_id] = 2


def run_evacuation_cases(cloud: EvacuationCloud, cases: list[EvacuationCase],
                         parallel: int = 10, timeout: float = 600.0) -> None:
    """Run every case, ``parallel`` at a time (provision_cloud.run_staged_cases)."""
    run_staged_cases(cloud, cases, parallel, timeout)


def serve_forks() -> None:
    """The fork server's main: provision_cloud's, with the evacuate flow's modules
    loaded too (the fork server freezes them with the rest before its first fork)."""
    import forkserver
    import provision_cloud

    for name in (*forkserver.PRELOAD, *provision_cloud.EXTRA_PRELOAD, *EXTRA_PRELOAD):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    provision_cloud.serve_forks()


class EvacuationForkServer(PreloadingForkServer):
    """PreloadingForkServer whose server runs :func:`serve_forks` of this module."""

    def __init__(self, env: dict[str, str]):
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "import evacuation_cloud; evacuation_cloud.serve_forks()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._lock = threading.Lock()
