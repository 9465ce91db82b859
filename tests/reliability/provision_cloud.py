"""A real provision-flow cloud whose conductors are killable subprocesses.

Not a test module: tests/reliability/conftest.py hands it out through fixtures.

Real throughout: SQLite with a fleet loaded and registered in placement,
reservations made by ``ReservationOps.reserve`` on the SQL jobboard, and
``fleetflow conductor`` processes (forked: tests/reliability/forkserver.py)
that serve the simulated hosts in-process themselves (cli/conductor.py) from
one shared fake-driver state file.

Two pools of hosts, chosen per reservation by a capability:

- ``good``: reservations there go ACTIVE;
- ``bad``: :meth:`ProvisionCloud.fill_bad_hosts` books each bad hypervisor
  full with guests placement does not know (drift, as after a lost delete):
  claims succeed, every build fails "capacity exceeded", each instance walks
  its alternates, nothing is left to reschedule onto, and the all-or-nothing
  reservation reverts. ``clear_bad_hosts`` removes them before the audit.

Each conductor can be pointed at its own jobboard (``board=``): the provision
flow's atom names are the same in every reservation, so a crash target
(``FLEETFLOW_CRASH_AT``) can only single out one reservation when the doomed
conductor sees no other job.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import threading
import time
import uuid as uuidlib

import sqlalchemy as sa
from forkserver import ForkServer  # this directory is on sys.path (conftest, PYTHONPATH)

from fleetflow.common import config, states
from fleetflow.common.crash_points import CRASH_ENV

GOOD, BAD = "good", "bad"
FLAVOR, IMAGE, TENANT = "m1.tiny", "cirros", "crash-tenant"
# Flow states no conductor moves on from (FAILURE: a revert itself failed).
FLOW_DONE = ("SUCCESS", "REVERTED", "FAILURE")

# Imported by the fork server on top of its own list, so a conductor that
# serves the fleet and runs the provision flow starts in a fraction of a second.
EXTRA_PRELOAD = ("fleetflow.flows.provision", "fleetflow.compute.agent",
                 "oslo_messaging.opts", "oslo_messaging._drivers.impl_rabbit",
                 "kombu.transport.memory")


def fleet_doc(good_hosts: int, bad_hosts: int, vcpus: int) -> dict:
    """Two racks of identical hosts: ``pool=good`` and ``pool=bad``."""
    inventory = {"VCPU": {"total": vcpus, "allocation_ratio": 1.0},
                 "MEMORY_MB": {"total": vcpus * 1024, "allocation_ratio": 1.0},
                 "DISK_GB": {"total": vcpus * 10, "allocation_ratio": 1.0}}
    racks = [{"name": pool, "hosts": count, "profile": "crash",
              "capabilities": {"pool": pool}}
             for pool, count in ((GOOD, good_hosts), (BAD, bad_hosts)) if count]
    return {"profiles": {"crash": {"inventory": inventory}},
            "regions": [{"name": "crash-region", "zones": [{"name": "z1", "racks": racks}]}],
            "flavors": [{"id": "1", "name": FLAVOR, "vcpus": 1, "ram_mb": 512, "disk_gb": 1}],
            "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": IMAGE}]}


class ProvisionCloud:
    """Database, fleet, placement, SQL jobboards, and conductor subprocesses."""

    def __init__(self, workdir, good_hosts: int = 4, bad_hosts: int = 2, vcpus: int = 128,
                 claim_expiry: int = 2, keepalive: float = 0.5, boot_seconds: float = 0.0,
                 engine_workers: int = 8, builds_per_host: int = 10):
        import fleetflow.flows.provision  # noqa: F401  (registers the flow to post)
        from fleetflow.compute import agent as compute_agent
        from fleetflow.compute.rpcapi import ComputeAPI
        from fleetflow.engine.backend import get_backend
        from fleetflow.persistence import fleet
        from fleetflow.persistence.db import Database
        from fleetflow.persistence.placement.client import from_conf as placement_from_conf

        self.workdir = str(workdir)
        db_url = f"sqlite:///{os.path.join(self.workdir, 'fleetflow.db')}"
        self.env = dict(os.environ)
        self.env.pop(CRASH_ENV, None)
        self.env.update({
            "FLEETFLOW_STATE_DIR": self.workdir,
            "FLEETFLOW_DATABASE_CONNECTION": db_url,
            "FLEETFLOW_JOBBOARD_BACKEND": "sql",
            "FLEETFLOW_JOBBOARD_BOARD_NAME": "provision-" + uuidlib.uuid4().hex[:8],
            "FLEETFLOW_JOBBOARD_CLAIM_EXPIRY": str(claim_expiry),
            "FLEETFLOW_JOBBOARD_KEEPALIVE_INTERVAL": str(keepalive),
            "FLEETFLOW_CONDUCTOR_ENGINE_WORKERS": str(engine_workers),
            # In-process transport: each conductor serves the fleet itself.
            # 'fake:' rather than the default kombu+memory: an idle kombu+memory
            # RPC server was measured burning ~0.2 CPU-seconds per second here,
            # and a dozen conductors each serving the fleet would starve the
            # machine; fake: polls every 50 ms for ~0.01.
            "FLEETFLOW_MESSAGING_TRANSPORT_URL": "fake:",
            "FLEETFLOW_MESSAGING_RPC_TIMEOUT": "20",
            "FLEETFLOW_COMPUTE_SIMULATE": "true",
            "FLEETFLOW_COMPUTE_STATE_PATH": os.path.join(self.workdir, "hosts.db"),
            "FLEETFLOW_COMPUTE_BOOT_SECONDS": str(boot_seconds),
            "FLEETFLOW_COMPUTE_MAX_CONCURRENT_BUILDS": str(builds_per_host),
            "PYTHONPATH": os.pathsep.join(
                [os.path.dirname(__file__)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        })
        self.conf = config.load(args=[], environ=self.env)
        self.database = Database(db_url)
        self.database.upgrade()
        with self.database.session() as session:
            fleet.load(session, fleet.expand(fleet_doc(good_hosts, bad_hosts, vcpus)))
        self.hosts = self._hosts_by_pool()
        # The test process serves the fleet too (the audit asks the hosts over
        # RPC), from the same state file as every conductor.
        self.agent = compute_agent.serve_fleet(self.conf, self.database)
        self.driver = self.agent.driver
        self.compute = ComputeAPI(self.conf, self.database)
        self.placement = placement_from_conf(self.conf, self.database)
        self.backend = get_backend(self.conf)
        self._boards: dict[str, object] = {}
        # reservation id -> {"board", "pool", "flow_id"}
        self.reservations: dict[str, dict] = {}
        self.squatters: list[tuple[str, str]] = []
        self.procs: list = []
        self.forkserver = PreloadingForkServer(self.env)

    def _hosts_by_pool(self) -> dict[str, list[str]]:
        from fleetflow.persistence.models import Host

        with self.database.session() as session:
            rows = session.execute(sa.select(Host.name, Host.capabilities)).all()
        pools: dict[str, list[str]] = {GOOD: [], BAD: []}
        for name, caps in rows:
            pools[(caps or {}).get("pool", GOOD)].append(name)
        return {pool: sorted(names) for pool, names in pools.items()}

    # -- boards and reservations ---------------------------------------------------
    def board(self, name: str | None = None):
        """The SQL jobboard ``name`` (the cloud's default board when None)."""
        from fleetflow.engine.jobboard.sql import SqlJobBoard

        name = name or self.conf.jobboard.board_name
        if name not in self._boards:
            board = SqlJobBoard(name, {"claim_expiry": float(self.conf.jobboard.claim_expiry)},
                                self.database, persistence=self.backend)
            board.connect()
            self._boards[name] = board
        return self._boards[name]

    def reserve(self, count: int, pool: str = GOOD, board: str | None = None,
                policy: str = states.ALL_OR_NOTHING) -> str:
        """A reservation of ``count`` instances in ``pool``, posted on ``board``."""
        from fleetflow.engine.submit import Submitter
        from fleetflow.services.reservations import ReservationOps, ReservationRequest

        ops = ReservationOps(self.conf, self.database,
                         submit=Submitter(self.board(board), self.backend))
        reservation, _ = ops.reserve(ReservationRequest(
            tenant_id=TENANT, user_id="crash-user", flavor_ref=FLAVOR, image_ref=IMAGE,
            min_count=count, max_count=count, capabilities={"pool": pool}, policy=policy))
        self.reservations[reservation.id] = {"board": board, "pool": pool,
                                             "flow_id": reservation.flow_id}
        return reservation.id

    def fill_bad_hosts(self) -> None:
        """Book every bad host's hypervisor full behind placement's back (see module doc)."""
        for host in self.hosts[BAD]:
            uuid = str(uuidlib.uuid4())
            self.driver.build_instance(host, uuid, {"VCPU": int(self.driver.capacity(host)
                                                                ["VCPU"])})
            self.squatters.append((host, uuid))

    def clear_bad_hosts(self) -> None:
        for host, uuid in self.squatters:
            self.driver.destroy_instance(host, uuid)
        self.squatters.clear()

    def owners(self, board: str | None = None) -> set[str]:
        """Names of the conductor workers holding a job of ``board`` now."""
        jobboard = self.board(board)
        return {owner for job in jobboard.iterjobs(ensure_fresh=True)
                if (owner := jobboard.find_owner(job))}

    # -- states --------------------------------------------------------------------
    def flow_state(self, reservation_id: str) -> str:
        from fleetflow.engine.submit import load_status

        return load_status(self.backend, self.reservations[reservation_id]["flow_id"])["state"]

    def status(self, reservation_id: str) -> str:
        from fleetflow.persistence import reservations as rows

        with self.database.session() as session:
            return rows.get(session, reservation_id).status

    def instances(self, reservation_id: str) -> list[dict]:
        from fleetflow.persistence import reservations as rows

        with self.database.session() as session:
            return [{"uuid": i.id, "status": i.status, "host": i.host}
                    for i in rows.instances(session, reservation_id)]

    def settled(self, reservation_id: str) -> bool:
        """Its flow ended (SUCCESS / REVERTED, or FAILURE: never resumed) and, unless it
        failed, its row says so too."""
        # The row first: one cheap read, and it settles last but for FAILURE.
        if self.status(reservation_id) in states.SETTLED:
            return self.flow_state(reservation_id) in FLOW_DONE
        return self.flow_state(reservation_id) == "FAILURE"

    def unsettled(self) -> list[str]:
        return [r for r in self.reservations if not self.settled(r)]

    def wait_settled(self, timeout: float = 240.0) -> None:
        wanted = list(self.reservations)
        deadline = time.monotonic() + timeout
        while True:
            left = [r for r in wanted if not self.settled(r)]
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    "reservations not settled: "
                    + ", ".join(f"{r} {self.status(r)}/{self.flow_state(r)}" for r in left)
                    + "\n" + self.log_tail())
            time.sleep(0.2)

    # -- conductor processes -------------------------------------------------------
    def spawn(self, name: str, board: str | None = None, crash_at: str | None = None):
        """``fleetflow conductor --workers 1 --name <name>`` on ``board``, forked."""
        env = dict(self.env)
        if board:
            env["FLEETFLOW_JOBBOARD_BOARD_NAME"] = board
        if crash_at:
            env[CRASH_ENV] = crash_at
        proc = self.forkserver.spawn(["conductor", "--workers", "1", "--name", name], env,
                                     os.path.join(self.workdir, f"conductor-{name}.log"))
        proc.name = name
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        from forkserver import stop_processes

        stop_processes(self.procs)

    def close(self) -> None:
        self.stop_all()
        self.forkserver.close()
        for board in self._boards.values():
            board.close()
        self.agent.stop()
        from fleetflow.compute import messaging

        messaging.forget_transport(self.conf)
        self.database.dispose()

    def log_tail(self, lines: int = 30, names=None) -> str:
        out = []
        for name in sorted(os.listdir(self.workdir)):
            if name.startswith("conductor-") and (names is None or name[10:-4] in names):
                with open(os.path.join(self.workdir, name), errors="replace") as fh:
                    out.append(f"--- {name}\n" + "".join(fh.readlines()[-lines:]))
        return "\n".join(out[-12:])

    # -- the invariants ------------------------------------------------------------
    def problems(self, expected: dict[str, str]) -> list[str]:
        """What breaks the rules, per reservation: ``expected`` maps id -> ACTIVE/REVERTED.

        ACTIVE: flow SUCCESS, every instance ACTIVE on a host that runs it,
        spawned exactly once. REVERTED: flow REVERTED, every instance REVERTED,
        spawned at most once and on no host any more.
        """
        found = []
        for rid, wanted in expected.items():
            flow_wanted = "SUCCESS" if wanted == states.ACTIVE else "REVERTED"
            status, flow = self.status(rid), self.flow_state(rid)
            if (status, flow) != (wanted, flow_wanted):
                found.append(f"reservation {rid}: {status}/{flow}, not {wanted}/{flow_wanted}")
            for inst in self.instances(rid):
                spawns = self.driver.spawn_count(inst["uuid"])
                guest = (self.driver.get_instance(inst["host"], inst["uuid"])
                         if inst["host"] else None)
                if wanted == states.ACTIVE:
                    ok = (inst["status"] == states.ACTIVE and spawns == 1 and guest is not None
                          and guest["state"] == states.ACTIVE)
                else:
                    ok = inst["status"] == states.REVERTED and spawns <= 1 and guest is None
                if not ok:
                    found.append(f"reservation {rid} ({wanted}) instance {inst['uuid']}: "
                                 f"{inst['status']} on {inst['host']}, spawns={spawns}, "
                                 f"guest={guest and guest['state']}")
        return found

    def audit_args(self) -> tuple:
        """``(database, placement client, compute API)`` for ``assert_audit_clean``."""
        return self.database, self.placement, self.compute


class CrashCase:
    """One reservation on a board of its own, a conductor doomed to die at
    ``target``, then a survivor that finishes it."""

    def __init__(self, index: int, target: str, pool: str, count: int):
        self.index, self.target, self.pool, self.count = index, target, pool, count
        self.board = f"case-{index}"
        self.reservation_id: str | None = None
        self.doomed = self.survivor = None
        self.doomed_code: int | None = None
        self.done = False

    def __repr__(self) -> str:
        return f"case {self.index} ({self.pool}, {self.target})"

    def fired(self, cloud: ProvisionCloud) -> str | None:
        """The ``atom:point`` at which the doomed conductor killed itself (from its log)."""
        path = os.path.join(cloud.workdir, f"conductor-doomed-{self.index}.log")
        with open(path, errors="replace") as fh:
            for line in fh:
                if "crash point " in line and " reached" in line:
                    return line.split("crash point ", 1)[1].split(" reached", 1)[0]
        return None


def run_crash_cases(cloud: ProvisionCloud, cases: list[CrashCase], parallel: int = 6,
                    timeout: float = 600.0) -> None:
    """Run every case, ``parallel`` at a time; each ends settled (or the run fails).

    Case i's conductor sees only case i's board, so its crash target can only
    fire in case i's reservation. It must die there (SIGKILL, checked by the
    caller through ``doomed_code``); a second conductor on the same board then
    takes the job over once the dead one's claim expires, and finishes it.
    """
    pending, running = list(cases), []
    deadline = time.monotonic() + timeout
    while pending or running:
        while pending and len(running) < parallel:
            case = pending.pop(0)
            case.reservation_id = cloud.reserve(case.count, case.pool, board=case.board)
            case.doomed = cloud.spawn(f"doomed-{case.index}", board=case.board,
                                      crash_at=case.target)
            running.append(case)
        for case in list(running):
            _advance(cloud, case)
            if case.done:
                running.remove(case)
        if time.monotonic() > deadline:
            raise AssertionError(f"cases not finished: {running + pending}\n"
                                 + cloud.log_tail(names={f"doomed-{c.index}" for c in running}
                                                  | {f"survivor-{c.index}" for c in running}))
        time.sleep(0.25)


def stop_process(proc) -> int:
    """Stop a conductor gracefully (SIGTERM) and return its exit status."""
    proc.terminate()
    return proc.wait(30)


def run_staged_cases(cloud, cases: list, parallel: int, timeout: float = 600.0) -> None:
    """Run cases that drive their own conductors (``start``, ``advance``, ``done``),
    ``parallel`` at a time; each ends settled (or the run fails).

    Case i's conductors ("first", "doomed", "survivor") see only case i's
    board, so its crash targets fire only in case i's work; the next
    conductor takes the job over once the dead one's claim expires.
    """
    pending, running = list(cases), []
    deadline = time.monotonic() + timeout
    while pending or running:
        while pending and len(running) < parallel:
            case = pending.pop(0)
            case.start(cloud)
            running.append(case)
        for case in list(running):
            case.advance(cloud)
            if case.done:
                running.remove(case)
        if time.monotonic() > deadline:
            names = {f"{stage}-{c.index}" for c in running
                     for stage in ("first", "doomed", "survivor")}
            raise AssertionError(f"cases not finished: {running + pending}\n"
                                 + cloud.log_tail(names=names))
        time.sleep(0.1)


def _advance(cloud: ProvisionCloud, case: CrashCase) -> None:
    if case.survivor is None:
        code = case.doomed.poll()
        if code is not None:
            case.doomed_code = code
            case.survivor = cloud.spawn(f"survivor-{case.index}", board=case.board)
        elif cloud.settled(case.reservation_id):
            # The target never fired: the doomed conductor finished the work.
            case.doomed.terminate()
            case.doomed_code = case.doomed.wait(30)
            case.done = True
        return
    if cloud.settled(case.reservation_id):
        case.survivor.terminate()  # idle now; stop_all() reaps it
        case.done = True


def serve_forks() -> None:
    """The fork server's main, with the provision flow's modules loaded first."""
    import forkserver

    for name in EXTRA_PRELOAD:
        importlib.import_module(name)
    # oslo.messaging finds its driver through stevedore, which reads the entry
    # points of every installed package once per process (~1 s here, in each
    # conductor otherwise). Reading them before forking leaves them cached in
    # every child; it starts no thread and opens nothing.
    with contextlib.suppress(ImportError, AttributeError):
        from stevedore import _cache

        _cache.get_group_all("oslo.messaging.drivers")
    if os.environ.get("FLEETFLOW_DATABASE_CONNECTION"):
        warm_start_up_queries()
    forkserver.serve()


def warm_start_up_queries() -> None:
    """Run, once, the statements every conductor runs as it starts, on the cloud's database.

    SQLAlchemy builds what a statement needs (its ORM compile state, the
    dialect's first-use set-up, the compiled SQL) the first time a process
    runs it, and each conductor forked cold paid that for its start-up reads:
    ~20 ms of its ~90 ms. What is built here is inherited by every child: the
    process's Database for the cloud's URL (``get_database``) stays
    registered, its pool emptied before the first fork, so a child's
    ``get_database`` returns this engine, with its compiled statements, and
    opens connections of its own. Reads only: the route of one host is
    looked up as a start writes it, and a start with the route unchanged
    writes nothing.
    """
    from fleetflow.common import config
    from fleetflow.compute import agent_setup
    from fleetflow.engine.jobboard.boards import make_jobboard
    from fleetflow.persistence import evacuations, migrate
    from fleetflow.persistence.db import get_database
    from fleetflow.persistence.models import Host

    conf = config.load(args=[])
    database = get_database(conf)
    try:
        names = sorted(agent_setup.load_inventories(database))
        agent_setup.load_storage(database, names)
        migrate.is_current(database.engine)
        with database.session() as session:
            evacuations.hosts_with_stale_copies(session)
            route = session.scalar(sa.select(Host.compute_agent).where(Host.name == names[0]))
        agent_setup.write_routes(database, names[:1], route)
        if conf.jobboard.backend == "sql":  # a conductor's first look for dead owners' jobs
            board = make_jobboard(conf)
            try:
                for job in board.iterjobs(ensure_fresh=True):
                    board.find_owner(job)
            finally:
                board.close()
    finally:
        database.dispose()


class PreloadingForkServer(ForkServer):
    """forkserver.ForkServer whose server runs :func:`serve_forks`."""

    def __init__(self, env: dict[str, str]):
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "import provision_cloud; provision_cloud.serve_forks()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._lock = threading.Lock()

