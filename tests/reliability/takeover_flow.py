"""A flow with real side effects, and a harness that kills the conductors running it.

Not a test module: the takeover tests (tests/reliability, tests/integration)
load it through their conftest fixtures, and the conductor subprocesses import
it by name when they rebuild the flow (flows/registry.py ``rebuild``), with
this directory on their PYTHONPATH.

The flow ``takeover-boot`` does per instance what a reservation does: claim
its resources in placement (the fleetflow database), then boot it on a fake
host (compute/drivers/fake.py, whose guests live in a SQLite file shared by
every process). Both effects carry the fencing token, are idempotent, and are
undone on revert. Every task also writes events (started / effect /
rejected / reverted, with its pid and token) so tests can see who did what.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid as uuidlib

import sqlalchemy as sa
from taskflow.patterns import linear_flow

from fleetflow.common import config
from fleetflow.common.crash_points import CRASH_ENV
from fleetflow.common.exceptions import StaleFence
from fleetflow.flows import registry
from fleetflow.flows.tasks.base import FleetTask

FLOW_NAME = "takeover-boot"
HOSTS_ENV = "TAKEOVER_HOSTS"
RESOURCES = {"VCPU": 1, "MEMORY_MB": 256}
PROJECT, USER = "takeover-project", "takeover-user"
EVENTS_DDL = ("CREATE TABLE IF NOT EXISTS takeover_events (flow_id VARCHAR(36), "
              "atom VARCHAR(64), event VARCHAR(16), token INTEGER, pid INTEGER)")

_lock = threading.Lock()
_clients: dict = {}


def clients() -> dict:
    """Database, placement client and fake driver of this process (built once)."""
    with _lock:
        if not _clients:
            from fleetflow.compute.drivers.fake import FakeDriver
            from fleetflow.persistence.db import get_database
            from fleetflow.persistence.placement import client as placement_client

            conf = config.load(args=[])
            database = get_database(conf)
            driver = FakeDriver.from_conf(conf)
            hosts = json.loads(os.environ[HOSTS_ENV])
            driver.add_hosts({name: host["inventory"] for name, host in hosts.items()})
            _clients.update(database=database, driver=driver,
                            placement=placement_client.from_conf(conf, database))
        return _clients


def record(flow_id: str, atom: str, event: str, fence: dict | None) -> None:
    with clients()["database"].session() as session:
        session.execute(sa.text("INSERT INTO takeover_events VALUES (:f, :a, :e, :t, :p)"),
                        {"f": flow_id, "a": atom, "e": event,
                         "t": (fence or {}).get("token"), "p": os.getpid()})


class _EffectTask(FleetTask):
    def __init__(self, name: str, instance: dict, pause: float):
        super().__init__(name=name)
        self.instance = instance
        self.pause = pause

    def _effect(self, flow_id, fence, apply) -> None:
        record(flow_id, self.name, "started", fence)
        time.sleep(self.pause)  # room for a kill or a SIGSTOP before the effect
        try:
            apply()
        except StaleFence:
            record(flow_id, self.name, "rejected", fence)
            raise
        record(flow_id, self.name, "effect", fence)


class ClaimResources(_EffectTask):
    """Claim the instance's resources on its host's provider. Revert: release them."""

    def execute(self, fence, flow_id):
        inst = self.instance
        self._effect(flow_id, fence, lambda: clients()["placement"].claim(
            inst["uuid"], {inst["rp"]: RESOURCES}, PROJECT, USER, fence=fence))

    def revert(self, fence, flow_id, **kwargs):
        clients()["placement"].release(self.instance["uuid"], fence=fence)
        record(flow_id, self.name, "reverted", fence)


class BootInstance(_EffectTask):
    """Boot the instance on its fake host. Revert: destroy it there."""

    def execute(self, fence, flow_id):
        inst = self.instance
        self._effect(flow_id, fence, lambda: clients()["driver"].build_instance(
            inst["host"], inst["uuid"], RESOURCES, fence=fence))

    def revert(self, fence, flow_id, **kwargs):
        clients()["driver"].destroy_instance(self.instance["host"], self.instance["uuid"],
                                             fence=fence)
        record(flow_id, self.name, "reverted", fence)


class FailOnPurpose(FleetTask):
    """Fails, so the whole flow reverts. Revert: nothing to undo."""

    def execute(self):
        raise RuntimeError("failing on purpose to revert the flow")


@registry.flow_factory(FLOW_NAME)
def takeover_boot(instances: list, fail: bool = False, pause: float = 0.0,
                  prefix: str = "inst"):
    """Per instance, in order: claim resources -> boot; then fail if ``fail``.

    ``prefix`` starts every atom name (``inst-0001-boot``), so a crash target
    (which names an atom) can single out one flow among several.
    """
    flow = linear_flow.Flow(FLOW_NAME)
    for index, inst in enumerate(instances):
        flow.add(ClaimResources(f"{prefix}-{index:04d}-claim", inst, pause),
                 BootInstance(f"{prefix}-{index:04d}-boot", inst, pause))
    if fail:
        flow.add(FailOnPurpose("fail-on-purpose"))
    return flow


class TakeoverCloud:
    """A database, a fleet of fake hosts, a jobboard, and conductor subprocesses."""

    def __init__(self, workdir, db_url: str, board: str = "sql", redis_url: str | None = None,
                 claim_expiry: int = 2, keepalive: float = 0.5, hosts: int = 3):
        from fleetflow.persistence.db import Database
        from fleetflow.persistence.placement.store import PlacementStore

        self.workdir = str(workdir)
        self.env = dict(os.environ)
        self.env.pop(CRASH_ENV, None)
        inventory = {"VCPU": {"total": 64, "reserved": 0, "allocation_ratio": 1.0},
                     "MEMORY_MB": {"total": 65536, "reserved": 0, "allocation_ratio": 1.0}}
        self.hosts = {f"host-{i}": {"rp": str(uuidlib.uuid4()), "inventory": inventory}
                      for i in range(hosts)}
        self.env.update({
            "FLEETFLOW_STATE_DIR": self.workdir,
            "FLEETFLOW_DATABASE_CONNECTION": db_url,
            "FLEETFLOW_JOBBOARD_BACKEND": board,
            "FLEETFLOW_JOBBOARD_BOARD_NAME": "takeover-" + uuidlib.uuid4().hex[:8],
            "FLEETFLOW_JOBBOARD_CLAIM_EXPIRY": str(claim_expiry),
            "FLEETFLOW_JOBBOARD_KEEPALIVE_INTERVAL": str(keepalive),
            "FLEETFLOW_CONDUCTOR_ENGINE_WORKERS": "4",
            "FLEETFLOW_COMPUTE_STATE_PATH": os.path.join(self.workdir, "hosts.db"),
            HOSTS_ENV: json.dumps(self.hosts),
            "PYTHONPATH": os.pathsep.join(
                [os.path.dirname(__file__)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        })
        if redis_url:
            self.env["FLEETFLOW_JOBBOARD_REDIS_URL"] = redis_url
        os.environ[HOSTS_ENV] = self.env[HOSTS_ENV]
        self.conf = config.load(args=[], environ=self.env)
        self.database = Database(db_url)
        self.database.upgrade()
        with self.database.session() as session:
            session.execute(sa.text(EVENTS_DDL))
        placement = PlacementStore(self.database)
        for name, host in self.hosts.items():
            provider = placement.create_provider(name, host["rp"])
            placement.set_inventories(host["rp"], provider["generation"], inventory)
        from fleetflow.compute.drivers.fake import FakeDriver
        from fleetflow.engine.backend import get_backend
        from fleetflow.engine.jobboard.boards import make_jobboard
        from fleetflow.persistence.placement.client import LocalPlacement

        self.driver = FakeDriver.from_conf(self.conf)
        self.driver.add_hosts({n: h["inventory"] for n, h in self.hosts.items()})
        self.placement = LocalPlacement(placement)
        self.backend = get_backend(self.conf)
        self.board = make_jobboard(self.conf, self.backend)
        self.flows: dict[str, list[dict]] = {}
        self.expect_revert: set[str] = set()
        self.procs: list = []
        from forkserver import ForkServer

        self.forkserver = ForkServer(self.env)
        self._host_cycle = 0

    # -- work ------------------------------------------------------------------------
    def submit(self, instances: int = 2, fail: bool = False, pause: float = 0.1,
               prefix: str = "inst") -> str:
        from fleetflow.engine.submit import submit

        names = sorted(self.hosts)
        insts = []
        for _ in range(instances):
            name = names[self._host_cycle % len(names)]
            self._host_cycle += 1
            insts.append({"uuid": str(uuidlib.uuid4()), "host": name,
                          "rp": self.hosts[name]["rp"]})
        flow_id = submit(self.board, self.backend, FLOW_NAME,
                         {"instances": insts, "fail": fail, "pause": pause,
                          "prefix": prefix})
        self.flows[flow_id] = insts
        if fail:
            self.expect_revert.add(flow_id)
        return flow_id

    def state(self, flow_id: str) -> str:
        from fleetflow.engine.submit import load_status

        return load_status(self.backend, flow_id)["state"]

    def unsettled(self) -> list[str]:
        return [f for f in self.flows if self.state(f) not in ("SUCCESS", "REVERTED")]

    def wait_settled(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.unsettled():
            if time.monotonic() > deadline:
                raise AssertionError(f"flows not settled: "
                                     f"{ {f: self.state(f) for f in self.unsettled()} }")
            time.sleep(0.2)

    def events(self, event: str | None = None) -> list[tuple]:
        with self.database.session() as session:
            rows = session.execute(sa.text(
                "SELECT flow_id, atom, event, token, pid FROM takeover_events")).all()
        return [tuple(r) for r in rows if event is None or r[2] == event]

    # -- conductor processes -------------------------------------------------------
    def spawn(self, name: str, crash_at: str | None = None):
        """A ``fleetflow conductor --name <name>`` process (forked from the fork server)."""
        env = dict(self.env)
        if crash_at:
            env[CRASH_ENV] = crash_at
        proc = self.forkserver.spawn(["conductor", "--workers", "1", "--name", name], env,
                                     os.path.join(self.workdir, f"conductor-{name}.log"))
        self.procs.append(proc)
        return proc

    @staticmethod
    def wait_exit(proc, timeout: float = 90.0) -> int:
        return proc.wait(timeout)

    def stop_all(self) -> None:
        from forkserver import stop_processes

        stop_processes(self.procs)

    def close(self) -> None:
        self.stop_all()
        self.forkserver.close()
        self.board.close()
        self.driver.close()
        self.database.dispose()

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for name in sorted(os.listdir(self.workdir)):
            if name.startswith("conductor-"):
                with open(os.path.join(self.workdir, name), errors="replace") as fh:
                    out.append(f"--- {name}\n" + "".join(fh.readlines()[-lines:]))
        return "\n".join(out)

    # -- the invariants ------------------------------------------------------------
    def check(self) -> dict[str, str]:
        """Every flow SUCCESS or REVERTED as planned; each effect exactly once; nothing leaks."""
        states = {f: self.state(f) for f in self.flows}
        problems = []
        for flow_id, insts in self.flows.items():
            wanted = "REVERTED" if flow_id in self.expect_revert else "SUCCESS"
            if states[flow_id] != wanted:
                problems.append(f"flow {flow_id} is {states[flow_id]}, not {wanted}")
            for inst in insts:
                guest = self.driver.get_instance(inst["host"], inst["uuid"])
                spawns = self.driver.spawn_count(inst["uuid"])
                held = self.placement.get_allocations(inst["uuid"]).allocations
                if wanted == "SUCCESS":
                    ok = (guest is not None and spawns == 1
                          and held == {inst["rp"]: RESOURCES})
                else:
                    ok = guest is None and spawns <= 1 and held == {}
                if not ok:
                    problems.append(f"flow {flow_id} ({wanted}) instance {inst['uuid']}: "
                                    f"guest={guest and guest['state']} spawns={spawns} "
                                    f"allocations={held}")
        # Audit: what the hosts run and what placement holds match the successes.
        live = {i["uuid"] for f, insts in self.flows.items() if f not in self.expect_revert
                for i in insts}
        guests = {g["uuid"] for host in self.hosts for g in self.driver.list_instances(host)}
        if guests != live:
            problems.append(f"guests {sorted(guests ^ live)} differ from the successes")
        for name, host in self.hosts.items():
            used = self.placement.usages(provider=host["rp"])
            count = sum(1 for f, insts in self.flows.items() if f not in self.expect_revert
                        for i in insts if i["host"] == name)
            if used.get("VCPU", 0) != count * RESOURCES["VCPU"]:
                problems.append(f"{name}: placement holds {used}, expected {count} instances")
        assert not problems, "\n".join(problems) + "\n" + self.log_tail()
        return states
