"""The unavoidable work of one member of an operation, timed part by part (bench/floor.py).

Each part calls the project's own code, in this process, against a cloud set
up the way ``fleetflow serve`` sets up its own: the same SQLite database and
fleet loader, the same placement client and checkpoint backend, and the
simulated hosts in agent processes reached over the transport serve uses
(``fleetflow-ipc``). A part's CPU is this process's and its agents' (from
/proc, as bench/reservation.py reads serve's); wall is the elapsed time. Both
are divided by the number of members the part served.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import time
import uuid as uuidlib

import sqlalchemy as sa
from reservation import cpu_seconds
from taskflow import states as tf_states
from taskflow.persistence import models as tf_models

from fleetflow.common import config
from fleetflow.compute import agent_processes
from fleetflow.engine.backend import get_backend
from fleetflow.flows import runtime
from fleetflow.flows.evacuate.fastpath import ClaimPrimaryMoves
from fleetflow.flows.vcluster.storage_routes import first_routes
from fleetflow.persistence import fleet
from fleetflow.persistence.db import get_database
from fleetflow.persistence.evacuations import migration_id_for
from fleetflow.persistence.fleet import stable_uuid
from fleetflow.persistence.models import Flavor
from fleetflow.plugin.checkpoints import CheckpointBuffer
from fleetflow.scheduler import scheduler
from fleetflow.scheduler.moves.place import ServerToMove, place_moves
from fleetflow.scheduler.plan import recent_failures, request_spec
from fleetflow.scheduler.snapshot import snapshot_from_db, snapshot_with_heartbeats
from fleetflow.scheduler.vcluster.place import Grouping, ServerMember, VolumeMember, place_vcluster
from fleetflow.scheduler.vcluster.plan import backend_states

TENANT = "bench"
# As [conductor] instances_per_atom's default.
INSTANCES_PER_ATOM = 100
# Servers per source host of an evacuation (the rack rebuild case: 1,000 off 10 hosts).
SERVERS_PER_SOURCE = 100
# The evacuation's max_parallel in bench/floor.py's end-to-end run: its lanes.
EVACUATION_LANES = 64


class Cloud:
    """A database with a generated fleet, its agents in child processes, the clients."""

    def __init__(self, workdir: str, hosts: int, hosts_per_rack: int = 16):
        fleet_file = os.path.join(workdir, "fleet.yaml")
        subprocess.run(["fleetflow", "fleet", "generate", "--hosts", str(hosts),
                        "--hosts-per-rack", str(hosts_per_rack), "-o", fleet_file],
                       check=True, capture_output=True)
        self.conf = config.load(environ=dict(
            os.environ, FLEETFLOW_STATE_DIR=workdir, FLEETFLOW_FLEET_FILE=fleet_file,
            FLEETFLOW_DATABASE_CONNECTION=f"sqlite:///{workdir}/fleetflow.db",
            FLEETFLOW_COMPUTE_BOOT_SECONDS="0"))
        self.database = get_database(self.conf)
        self.database.upgrade()
        with self.database.session() as session:
            fleet.load(session, fleet.expand(fleet.read(self.conf.fleet.file)))
        url = agent_processes.transport_url(self.conf)
        self.conf.set_override("transport_url", url, group="messaging")
        self.agents = agent_processes.AgentProcesses(
            self.conf, self.conf.compute.agent_processes, url).start()
        self.rt = runtime.install_from_conf(self.conf, self.database)
        self.persistence = get_backend(self.conf)
        with self.database.session() as session:
            flavor = session.scalars(sa.select(Flavor).where(Flavor.name == "m1.tiny")).one()
            self.resources = dict(flavor.resources)
        self.host_names = sorted(h.name for h in self.snapshot().hosts)

    def snapshot(self, heartbeats: bool = False):
        usage = self.rt.placement.usages_by_provider()
        with self.database.session() as session:
            if heartbeats:
                return snapshot_with_heartbeats(session, usage,
                                                self.conf.compute.service_down_time)
            return snapshot_from_db(session, usage, recent_failures(session))

    def close(self) -> None:
        self.agents.stop()
        runtime.uninstall()
        self.database.dispose()


def timed(fn, members: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per member of one call of ``fn``: this process's CPU (to the
    nanosecond) and its agents' (from /proc, in clock ticks)."""
    agents = _children()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    agents0 = sum(cpu_seconds(pid) or 0.0 for pid in agents)
    fn()
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    cpu += sum(cpu_seconds(pid) or 0.0 for pid in agents) - agents0
    return 1000 * cpu / members, 1000 * wall / members


def _children() -> list[int]:
    pid = os.getpid()
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return [int(child) for child in children.read().split()]


def new_ids(n: int) -> list[str]:
    return [str(uuidlib.uuid4()) for _ in range(n)]


def batched_builds(rt, hosts: dict[str, str], resources: dict) -> None:
    """Build ``{uuid: host}`` as the agents take builds at their cheapest: one
    ``build_instances`` RPC and one transaction of the agent for a group's
    (``INSTANCES_PER_ATOM``) builds bound for the same agent."""
    by_server: dict[str, list[dict]] = {}
    for uuid, host in hosts.items():
        by_server.setdefault(rt.compute.routes.server_for(host), []).append(
            {"host": host, "uuid": uuid, "resources": resources, "image": "cirros",
             "fence": None})
    for server, builds in by_server.items():
        for start in range(0, len(builds), INSTANCES_PER_ATOM):
            answers = rt.compute.send_builds(server, builds[start:start + INSTANCES_PER_ATOM],
                                             answer_within=1.0, timeout=60)
            assert all("guest" in answer for answer in answers), answers


# -- checkpoints -------------------------------------------------------------

def checkpoints(cloud: Cloud, n: int, chain: list[tuple[str, object]],
                per: int | None = None) -> tuple[float, float]:
    """The atom details of ``n`` members, each a chain of atoms (kind, result), stored
    as the fleetflow engine stores them: in batches through its checkpoint buffer, one
    wave per link of the chain (its RUNNING with the link before's SUCCESS), then the
    last link's SUCCESS. The logbook's first save (every atom PENDING) is not timed.
    ``per``: the chain stands for that many members at once (a group's task), so
    ``ceil(n / per)`` chains are stored, still divided by ``n``."""
    members = n
    if per:
        members = -(-n // per)
    book = tf_models.LogBook("floor")
    flow = tf_models.FlowDetail("floor", str(uuidlib.uuid4()))
    book.add(flow)
    waves = []
    for link, (kind, _result) in enumerate(chain):
        detail_class = tf_models.RetryDetail if kind == "retry" else tf_models.TaskDetail
        wave = [detail_class(f"m-{i:05d}-{link}", str(uuidlib.uuid4()))
                for i in range(members)]
        for detail in wave:
            flow.add(detail)
        waves.append(wave)
    with contextlib.closing(cloud.persistence.get_connection()) as conn:
        conn.save_logbook(book)

    def store():
        buffer = CheckpointBuffer(cloud.persistence)
        for link in range(len(chain) + 1):
            if link:
                result = chain[link - 1][1]
                for detail in waves[link - 1]:
                    detail.put(tf_states.SUCCESS, result)
                    buffer.update_atom_details(detail)
            if link < len(chain):
                for detail in waves[link]:
                    detail.state, detail.intention = tf_states.RUNNING, tf_states.EXECUTE
                    buffer.update_atom_details(detail)
            buffer.flush()
    return timed(store, n)


# -- reservation ----------------------------------------------------------------

def reservation(cloud: Cloud, n: int) -> dict:
    rt, uuids = cloud.rt, new_ids(n)
    spec = {"resources": cloud.resources, "min_count": n, "max_count": n}
    snapshot = cloud.snapshot()
    with cloud.database.session() as session:
        req = request_spec(session, spec, uuids)
    result = None

    def decide():
        nonlocal result
        result = scheduler.schedule(req, snapshot, alternates=cloud.conf.scheduler.alternates,
                                    weigher=cloud.conf.scheduler.weigher)
    parts = {"schedule": timed(decide, n)}
    hosts = {uuids[p.index]: p.host for p in result.instances}
    claims = {u: {result.host_uuids[h]: dict(cloud.resources)} for u, h in hosts.items()}
    parts["claim"] = timed(lambda: rt.placement.claim_many(
        claims, project_id=TENANT, user_id=TENANT), n)
    parts["build RPC"] = timed(lambda: batched_builds(rt, hosts, cloud.resources), n)
    # A reservation of more than [conductor] instances_per_atom instances is
    # built in groups: one task a group, whose result names every member's host.
    per = INSTANCES_PER_ATOM if n > INSTANCES_PER_ATOM else None
    chain = ([("task", {"hosts": {str(i): "host-0001" for i in range(per)}})] if per else
             [("retry", "host-0001"), ("task", {"host": "host-0001", "fast_path": True}),
              ("task", {"host": "host-0001", "state": "ACTIVE"})])
    parts["checkpoints"] = checkpoints(cloud, n, chain, per)
    for u, h in hosts.items():  # leave the cloud as it was
        rt.compute.destroy_instance(h, u)
    rt.placement.release_many(list(claims))
    return parts


# -- evacuation -----------------------------------------------------------------

def evacuation(cloud: Cloud, n: int) -> dict:
    """``n`` servers rebuilt off dead hosts (a rack rebuild)."""
    rt, uuids = cloud.rt, new_ids(n)
    sources = cloud.host_names[:math.ceil(n / SERVERS_PER_SOURCE)]
    on = {u: sources[i % len(sources)] for i, u in enumerate(uuids)}
    rt.placement.claim_many({u: {stable_uuid(h): dict(cloud.resources)} for u, h in on.items()},
                            project_id=TENANT, user_id=TENANT)
    for u, h in on.items():
        rt.compute.build_instance(h, u, cloud.resources, image="cirros")
    for h in sources:
        rt.compute.set_faults(h, dead=True)
    snapshot = cloud.snapshot(heartbeats=True)
    servers = [ServerToMove(key=u, source=h, resources=dict(cloud.resources))
               for u, h in on.items()]
    result = None

    def decide():
        nonlocal result
        result = place_moves(servers, snapshot, excluded_hosts=sources,
                             alternates=cloud.conf.scheduler.alternates,
                             weigher=cloud.conf.scheduler.weigher)
    parts = {"schedule": timed(decide, n)}
    wanted = {u: (str(i), result.candidates[u][0], 1, migration_id_for("floor", u, 1), TENANT,
                  dict(cloud.resources)) for i, u in enumerate(uuids)}
    parts["claim"] = timed(lambda: ClaimPrimaryMoves._claim(rt, wanted, None), n)

    def move_all():
        for u, (_i, host, _a, migration, _t, resources) in wanted.items():
            record = rt.compute.start_move(host, migration, "rebuild", u, on[u], resources,
                                           image="cirros")
            while record["status"] in ("queued", "running"):
                record = rt.compute.get_move(host, migration)
            rt.compute.confirm_move(host, migration)
    parts["move RPCs"] = timed(move_all, n)
    # An evacuation of more than [conductor] instances_per_atom servers moves each
    # lane's servers in tasks of up to that many: a group's task stands for them.
    lane = math.ceil(n / EVACUATION_LANES)
    per = min(INSTANCES_PER_ATOM, lane) if n > INSTANCES_PER_ATOM else None
    chain = ([("task", {"hosts": {str(i): "host-0001" for i in range(per)}})] if per else
             [("retry", "host-0001"), ("task", "mig-0001"),
              ("task", {"host": "host-0001", "kind": "rebuild", "status": "completed"}),
              ("task", []), ("task", {"host": "host-0001", "volumes_lost": []})])
    parts["checkpoints"] = checkpoints(cloud, n, chain, per)
    for h in sources:
        rt.compute.set_faults(h, dead=False)
    for u, (_i, host, _a, _migration, _t, _r) in wanted.items():
        rt.compute.destroy_instance(host, u)
        rt.compute.destroy_instance(on[u], u)
    rt.placement.release_many([*uuids, *(w[3] for w in wanted.values())])
    return parts


# -- virtual cluster --------------------------------------------------------------

def vcluster(cloud: Cloud, n: int) -> dict:
    """``n`` servers and ``n`` volumes shaped as bench/vcluster.py's: per member."""
    from vcluster import cluster_body

    rt, members = cloud.rt, 2 * n
    body = cluster_body(n)["vcluster"]
    servers = [ServerMember(i["name"], dict(cloud.resources)) for i in body["instances"]
               if i["type"] == "server"]
    volumes = [VolumeMember(i["name"], i["spec"]["size"], i["spec"]["volume_type"])
               for i in body["instances"] if i["type"] == "volume"]
    groupings = [Grouping(g["name"], g["membersRef"], g["spec"]["rule"])
                 for g in body["groupings"]]
    snapshot = cloud.snapshot(heartbeats=True)
    with cloud.database.session() as session:
        backends = backend_states(session, rt.placement.usages_by_provider())
    result = None

    def decide():
        nonlocal result
        result = place_vcluster(servers, volumes, groupings, snapshot, backends)
    parts = {"schedule": timed(decide, members)}
    ids = {m.name: str(uuidlib.uuid4()) for m in [*servers, *volumes]}
    hosts = {s.name: result.hosts[s.name][0] for s in servers}
    on_backend = {v.name: result.backends[v.name][0] for v in volumes}
    backend_uuids = {b.name: b.uuid for b in backends}
    claims = {ids[s]: {stable_uuid(h): dict(cloud.resources)} for s, h in hosts.items()}
    claims.update({ids[v.name]: {backend_uuids[on_backend[v.name]]: {"DISK_GB": v.size_gb}}
                   for v in volumes})
    parts["claim"] = timed(lambda: rt.placement.claim_many(
        claims, project_id=TENANT, user_id=TENANT), members)
    with cloud.database.session() as session:
        routes = first_routes(session, set(on_backend.values()), cloud.conf)

    def build_all():
        batched_builds(rt, {ids[s]: h for s, h in hosts.items()}, cloud.resources)
        for v in volumes:
            rt.compute.create_volume(routes[on_backend[v.name]], on_backend[v.name],
                                     ids[v.name], v.size_gb, v.volume_type)
        for v in volumes:
            server = v.name.replace("v", "s", 1)
            rt.compute.attach_volume(hosts[server], ids[server], ids[v.name])
    parts["build, create, attach RPCs"] = timed(build_all, members)
    # A run of more than [conductor] instances_per_atom members is built in
    # groups: one task a group, whose result names where every member ended.
    per = INSTANCES_PER_ATOM if members > INSTANCES_PER_ATOM else None
    chain = ([("task", {"built": {str(uuidlib.uuid4()): "host-0001" for _ in range(per)}})]
             if per else
             [("retry", "host-0001"), ("task", {"host": "host-0001", "state": "ACTIVE"})])
    parts["checkpoints"] = checkpoints(cloud, members, chain, per)
    for s, h in hosts.items():
        rt.compute.destroy_instance(h, ids[s])
    rt.placement.release_many(list(claims))
    return parts

