"""A real vcluster cloud whose conductors are killable subprocesses.

Not a test module: tests/reliability/conftest.py hands it out through fixtures.

Built on provision_cloud.ProvisionCloud (database, SQL jobboards, forked
``fleetflow conductor`` processes serving the simulated hosts and their
storage from one shared state file), with a fleet of its own: every host has
a disk of its own and every rack a shared backend, and racks come in *lanes*
(a ``lane`` capability each server of a cluster asks for), so clusters
meant to fail never share a host or a backend with the others:

- ``good``: clusters there go ACTIVE;
- ``nohost``: each hypervisor is booked full behind placement's back (as
  provision_cloud's bad hosts), so every boot fails on every candidate and
  the run reverts; the volumes are created first, then deleted by the revert;
- ``nodisk``: each backend fails its creates (kept in the state file, so every
  conductor sees it); the servers boot, then the revert destroys them;
- ``attach``: for the one case whose attach fails because a server's host
  died just before it (a host dying must not touch the other clusters).

Clusters are created and deleted the way the API does it
(services/vclusters.py ``VClusterOps``), each posted on the board the caller
names: atom names are the same in every cluster, so a crash target
(``FLEETFLOW_CRASH_AT``) singles out one cluster only when the doomed
conductor sees no other job.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import subprocess
import sys
import threading
from collections import defaultdict
from unittest import mock

import provision_cloud  # this directory is on sys.path (conftest, PYTHONPATH)
import sqlalchemy as sa
from provision_cloud import FLOW_DONE, PreloadingForkServer, ProvisionCloud

from fleetflow.common import states

TENANT = "vc-tenant"
GOOD, NOHOST, NODISK, ATTACH = "good", "nohost", "nodisk", "attach"
FLAVOR = "m1.tiny"  # provision_cloud's one flavor
IMAGE = "cirros"
# A create's end states, and where a delete ends.
BUILT = (states.ACTIVE, states.REVERTED)
AT_REST = (*BUILT, states.DELETED, states.ERROR, states.PAUSED)
# More than any case can spend: a backend of the nodisk lane never creates.
FAILED_CREATES = 1_000_000
EXTRA_PRELOAD = ("fleetflow.flows.vcluster", "fleetflow.flows.vcluster.build_tasks",
                 "fleetflow.flows.vcluster.members",
                 "fleetflow.flows.vcluster.teardown_tasks", "fleetflow.scheduler.vcluster.place")


def fleet_doc(lanes: dict[str, tuple[int, int]], vcpus: int) -> dict:
    """``{lane: (racks, hosts per rack)}`` of identical hosts, each with its own disk,
    each rack with a shared backend."""
    inventory = {"VCPU": {"total": vcpus, "allocation_ratio": 1.0},
                 "MEMORY_MB": {"total": vcpus * 1024, "allocation_ratio": 1.0},
                 "DISK_GB": {"total": vcpus * 10, "allocation_ratio": 1.0}}
    racks = [{"name": f"{lane}{n}", "hosts": hosts, "profile": "vc",
              "capabilities": {"lane": lane}}
             for lane, (count, hosts) in lanes.items() for n in range(1, count + 1)]
    return {"profiles": {"vc": {"inventory": inventory,
                                "local_storage": {"capacity_gb": 5000,
                                                  "volume_types": ["local"]}}},
            "rack_storage": {"capacity_gb": 20000, "volume_types": ["ssd"]},
            "regions": [{"name": "vc-region", "zones": [{"name": "z1", "racks": racks}]}],
            "flavors": [{"id": "1", "name": FLAVOR, "vcpus": 1, "ram_mb": 512, "disk_gb": 1}],
            "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": IMAGE}]}


def server(name: str, lane: str) -> dict:
    return {"name": name, "type": "server", "spec": {"imageRef": IMAGE, "flavorRef": FLAVOR,
                                                     "capabilities": {"lane": lane}}}


def volume(name: str, size: int = 10) -> dict:
    return {"name": name, "type": "volume", "spec": {"size": size}}


def grouping(name: str, members: list[str], rule: str, scope: str | None = None) -> dict:
    return {"name": name, "membersRef": members,
            "spec": {"rule": rule} | ({"scope": scope} if scope else {})}


def two_servers_apart(lane: str) -> dict:
    """Two servers apart, each with its volume beside it (the second example of
    docs/vcluster.md), its servers asking for ``lane``."""
    return {"instances": [server("db-server-1", lane), volume("db-vol-1"),
                          server("db-server-2", lane), volume("db-vol-2")],
            "groupings": [grouping("group-1", ["db-server-1", "db-vol-1"], "affinity"),
                          grouping("group-2", ["db-server-2", "db-vol-2"], "affinity"),
                          grouping("group-3", ["db-server-1", "db-server-2"], "anti-affinity"),
                          grouping("group-4", ["db-vol-1", "db-vol-2"], "anti-affinity")]}


class VClusterCloud(ProvisionCloud):
    """ProvisionCloud with the lanes above, and vclusters instead of reservations.

    ``status``, ``flow_state``, ``settled`` and ``unsettled`` are keyed by
    vcluster id here, and look at the cluster's latest run.
    """

    def __init__(self, workdir, lanes: dict[str, tuple[int, int]], vcpus: int = 64,
                 agent_threads: int = 16, **kwargs):
        import fleetflow.flows.vcluster  # noqa: F401  (registers the flows to post)
        from fleetflow.services.hosts import HostOps

        # ProvisionCloud loads the fleet its fleet_doc describes; this one is
        # swapped in for the construction. Unset, agent_threads would start an
        # RPC thread per build slot of every host in each conductor.
        with mock.patch.object(provision_cloud, "fleet_doc",
                               lambda *_args: fleet_doc(lanes, vcpus)), \
                mock.patch.dict(os.environ,
                                {"FLEETFLOW_COMPUTE_AGENT_THREADS": str(agent_threads)}):
            super().__init__(workdir, vcpus=vcpus, **kwargs)
        # A fork server with the vcluster flows loaded too: each conductor
        # would import them again otherwise.
        self.forkserver.close()
        self.forkserver = VClusterForkServer(self.env)
        self.host_ops = HostOps(self.conf, self.database,
                                getattr(self.placement, "store", None), self.compute)
        self.lanes = self._lanes()
        # vcluster id -> {"board", "lane", "expected": statuses it may end in,
        #                 "flow_ids": [build, delete]}
        self.vclusters: dict[str, dict] = {}
        self._settled: set[str] = set()  # flow ids of runs that ended

    def _lanes(self) -> dict[str, dict[str, list[str]]]:
        """``{lane: {"hosts": [...], "backends": [...]}}``."""
        from fleetflow.persistence.models import Host, StorageBackend

        found: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"hosts": [],
                                                                      "backends": []})
        with self.database.session() as session:
            racks = {}
            for name, rack, caps in session.execute(
                    sa.select(Host.name, Host.rack, Host.capabilities).order_by(Host.name)):
                racks[rack] = caps["lane"]
                found[caps["lane"]]["hosts"].append(name)
            for name, rack in session.execute(sa.select(StorageBackend.name,
                                                        StorageBackend.rack)):
                found[racks[rack]]["backends"].append(name)
        return dict(found)

    # -- faults ------------------------------------------------------------------
    def break_lanes(self) -> None:
        """Book every nohost hypervisor full; make every nodisk backend fail its creates."""
        for host in self.lanes.get(NOHOST, {}).get("hosts", []):
            squatter = f"squatter-{host}"
            self.driver.build_instance(host, squatter,
                                       {"VCPU": int(self.driver.capacity(host)["VCPU"])})
            self.squatters.append((host, squatter))
        for backend in self.lanes.get(NODISK, {}).get("backends", []):
            self.driver.set_backend_faults(backend, fail_next_creates=FAILED_CREATES)

    def mend_lanes(self) -> None:
        """Undo :meth:`break_lanes` (before the audit)."""
        self.clear_bad_hosts()
        for backend in self.lanes.get(NODISK, {}).get("backends", []):
            self.driver.set_backend_faults(backend, fail_next_creates=0)

    def set_dead(self, host: str, dead: bool) -> None:
        self.host_ops.simulate(host, dead=dead)

    # -- vclusters ---------------------------------------------------------------
    def ops(self, board: str | None = None):
        from fleetflow.engine.submit import Submitter
        from fleetflow.services.vclusters import VClusterOps

        return VClusterOps(self.conf, self.database,
                           submit=Submitter(self.board(board), self.backend))

    def create(self, body: dict, board: str | None = None, lane: str = GOOD,
               name: str = "db", expected: tuple[str, ...] | None = None) -> str:
        """The cluster ``body`` describes, its build posted on ``board``."""
        from fleetflow.services.vclusters import VClusterRequest

        vcluster, created = self.ops(board).create(VClusterRequest(
            tenant_id=TENANT, user_id="crash-user", name=name, instances=body["instances"],
            groupings=body.get("groupings", [])))
        assert created
        if expected is None:
            expected = (states.ACTIVE,) if lane == GOOD else (states.REVERTED,)
        self.vclusters[vcluster.id] = {"board": board, "lane": lane, "expected": expected,
                                       "flow_ids": [vcluster.flow_id]}
        return vcluster.id

    def delete(self, vcluster_id: str) -> None:
        """Post the cluster's teardown on its board; it must end DELETED."""
        record = self.vclusters[vcluster_id]
        vcluster = self.ops(record["board"]).delete(None, vcluster_id)
        record["flow_ids"].append(vcluster.flow_id)
        record["expected"] = (states.DELETED,)

    def holders(self) -> dict[str, str]:
        """``{conductor worker: flow id of the run it holds}`` on the default board."""
        board = self.board()
        return {owner: job.details["flow_uuid"] for job in board.iterjobs(ensure_fresh=True)
                if (owner := board.find_owner(job))}

    def view(self, vcluster_id: str) -> dict:
        return self.ops().show(None, vcluster_id)

    def run_status(self, vcluster_id: str) -> dict:
        """The latest run's flow (engine/submit.py ``load_status``)."""
        from fleetflow.engine.submit import load_status

        return load_status(self.backend, self.vclusters[vcluster_id]["flow_ids"][-1])

    def flow_state(self, vcluster_id: str) -> str:
        return self.run_status(vcluster_id)["state"]

    def status(self, vcluster_id: str) -> str:
        from fleetflow.persistence.models import VCluster

        with self.database.session() as session:
            return session.get(VCluster, vcluster_id).status

    def settled(self, vcluster_id: str) -> bool:
        """Its latest run ended (or stopped for good) and, unless it failed, the row says so.

        SUSPENDED alone is no end: every engine passes through it as it
        starts; a teardown paused by its first failure (on_error pause) waits
        for an operator, so its run has ended (badly).
        """
        flow_id = self.vclusters[vcluster_id]["flow_ids"][-1]
        if flow_id in self._settled:
            return True  # nothing here resumes a run that ended
        run = self.run_status(vcluster_id)
        done = run["state"] == "FAILURE" or (run["state"] == "SUSPENDED" and run["paused"]) \
            or (run["state"] in FLOW_DONE and self.status(vcluster_id) in AT_REST)
        if done:
            self._settled.add(flow_id)
        return done

    def unsettled(self) -> list[str]:
        return [v for v in self.vclusters if not self.settled(v)]

    # -- the invariants ------------------------------------------------------------
    def _world(self) -> tuple[dict, dict]:
        """Every guest and every live volume of the cloud: ``{uuid: [(host, state)]}``,
        ``{volume id: [(backend, status, attached to)]}``."""
        guests: dict[str, list] = defaultdict(list)
        for host in self.driver.hosts:
            for guest in self.driver.list_instances(host):
                guests[guest["uuid"]].append((host, guest["state"]))
        volumes: dict[str, list] = defaultdict(list)
        for backend in self.driver.backends:
            for vol in self.driver.list_volumes(backend):
                volumes[vol["volume_id"]].append((backend, vol["status"], vol["attached_to"]))
        return guests, volumes

    def problems(self) -> list[str]:
        """What breaks the rules, per cluster, by how it ended.

        The cluster's status is one it may end in, its latest run's flow
        SUCCESS (REVERTED for a reverted build). ACTIVE: every server ACTIVE
        on its host, its one guest there, holding its flavor there only; each
        volume on its backend (live there and nowhere else) and holding its
        size there only, attached to its server when a grouping of exactly
        the two ties them; every grouping satisfied. REVERTED or DELETED: no
        guest, no live volume, no allocation, no server group left. Always:
        at most one effective spawn per server (exactly one when ACTIVE) and
        at most one create per volume.
        """
        guests, volumes = self._world()
        found = []
        for vid, record in self.vclusters.items():
            status, flow = self.status(vid), self.flow_state(vid)
            flow_wanted = "REVERTED" if status == states.REVERTED else "SUCCESS"
            if status not in record["expected"] or flow != flow_wanted:
                found.append(f"vcluster {vid}: {status}/{flow}, not one of "
                             f"{record['expected']} (flow {flow_wanted})")
            view = self.view(vid)
            found += [f"vcluster {vid} ({status}): {why}"
                      for why in self._member_problems(vid, view, status, guests, volumes)]
        return found

    def _member_problems(self, vid: str, view: dict, status: str, guests: dict,
                         volumes: dict) -> list[str]:
        from fleetflow.persistence.fleet import stable_uuid
        from fleetflow.persistence.models import ServerGroup, Volume

        live = status == states.ACTIVE
        with self.database.session() as session:
            sizes = dict(session.execute(sa.select(Volume.id, Volume.size_gb).where(
                Volume.vcluster_id == vid)).all())
            groups_left = session.scalars(sa.select(ServerGroup.id).where(
                ServerGroup.vcluster_id == vid)).all()
        ids = {m["name"]: m["id"] for m in view["instances"]}
        found = []
        for member in view["instances"]:
            uuid = member["id"]
            held = self.placement.get_allocations(uuid).allocations
            if member["type"] == states.MEMBER_SERVER:
                host, spawns = member["host"], self.driver.spawn_count(uuid)
                copies = guests.get(uuid, [])
                if live:
                    ok = (member["status"] == states.ACTIVE and spawns == 1
                          and copies == [(host, states.ACTIVE)]
                          and held == {stable_uuid(host): self.resources})
                else:
                    gone = states.DELETED if status == states.DELETED else states.REVERTED
                    ok = member["status"] == gone and not copies and not held and spawns <= 1
                if not ok:
                    found.append(f"server {member['name']} {uuid}: {member['status']} on "
                                 f"{host}; guests {copies}; allocations {held}; "
                                 f"spawns {spawns}")
                continue
            backend, creates = member["backend"], self.driver.volume_create_count(uuid)
            copies = volumes.get(uuid, [])
            if live:
                server = ids.get(attachments(view).get(member["name"], ""))
                wanted = states.VOLUME_IN_USE if server else states.VOLUME_AVAILABLE
                ok = (member["status"] == wanted and creates == 1
                      and ids.get(member["attached_to"] or "") == server
                      and [(b, a) for b, _s, a in copies] == [(backend, server)]
                      and held == {stable_uuid(backend): {"DISK_GB": sizes[uuid]}})
            else:
                ok = (member["status"] == states.VOLUME_DELETED and not copies and not held
                      and creates <= 1)
            if not ok:
                found.append(f"volume {member['name']} {uuid}: {member['status']} on "
                             f"{backend}, attached to {member['attached_to']}; on backends "
                             f"{copies}; allocations {held}; creates {creates}")
        if live:
            found += [f"grouping {g['name']} not satisfied: {g['domains']}"
                      for g in view["groupings"] if not g["satisfied"]]
        elif groups_left:
            found.append(f"server groups left: {groups_left}")
        return found

    @functools.cached_property
    def resources(self) -> dict:
        """The one flavor's resources: what each server holds on its host."""
        from fleetflow.persistence.models import Flavor

        with self.database.session() as session:
            return dict(session.get(Flavor, "1").resources)


def attachments(view: dict) -> dict[str, str]:
    """``{volume name: server name}``: an affinity grouping of exactly one server and
    one volume attaches the volume to the server."""
    kinds = {m["name"]: m["type"] for m in view["instances"]}
    found = {}
    for g in view["groupings"]:
        pair = {kinds.get(n): n for n in g["membersRef"]}
        if g["rule"] == "affinity" and len(g["membersRef"]) == 2 and len(pair) == 2:
            found[pair[states.MEMBER_VOLUME]] = pair[states.MEMBER_SERVER]
    return found


def serve_forks() -> None:
    """The fork server's main: provision_cloud's, with the vcluster flows' modules
    loaded too (the fork server freezes them with the rest before its first fork)."""
    import forkserver

    for name in (*forkserver.PRELOAD, *provision_cloud.EXTRA_PRELOAD, *EXTRA_PRELOAD):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    provision_cloud.serve_forks()


class VClusterForkServer(PreloadingForkServer):
    """PreloadingForkServer whose server runs :func:`serve_forks` of this module."""

    def __init__(self, env: dict[str, str]):
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "import vcluster_cloud; vcluster_cloud.serve_forks()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._lock = threading.Lock()
