"""The vcluster build flow: a create, or an update that adds members.

    vcluster-lifecycle         SCHEDULING / UPDATING; on revert, how the run ended
    place (retry: schedule-retry schedules again after a lost claim race)
      schedule                 every new member placed jointly, the others pinned
      claim-all                one multi-consumer write: servers and volumes, 0 or all
    members (unordered)
      srv-0000 (retry: srv-0000-retry walks its host candidates, claiming alternates)
        srv-0000-boot          build on the host, wait for ACTIVE
      vol-0000 (retry: vol-0000-retry walks its backend candidates, claiming alternates)
        vol-0000-create        create on the backend through a host that reaches it
    attach                     each volume to its server
    finish                     ACTIVE

With ``batch`` (a run of more members than ``[conductor] instances_per_atom``),
``members`` holds one task a group of that many instead, ``batch-0000``
building the run's first ``batch`` members (servers first, then volumes),
each as its chain would (batch.py).

Atom names derive from member indexes, which a cluster never reuses, so
any conductor rebuilds the same flow from the factory's arguments.
"""

from __future__ import annotations

from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.flows import keys
from fleetflow.flows.registry import flow_factory
from fleetflow.flows.status_listener import ReservationStatusListener
from fleetflow.flows.tasks.boot import BootInstance
from fleetflow.flows.vcluster.batch import BuildMembers
from fleetflow.flows.vcluster.build_tasks import (
    ClaimVCluster,
    FinishVCluster,
    ScheduleRetry,
    ScheduleVCluster,
    VClusterLifecycle,
)
from fleetflow.flows.vcluster.members import (
    AttachVolumes,
    CreateVolume,
    MemberCandidatesRetry,
)

SERVER, VOLUME = "server", "volume"


def server_prefix(index: int) -> str:
    return f"srv-{index:04d}"


def volume_prefix(index: int) -> str:
    return f"vol-{index:04d}"


def server_chain(server: dict) -> linear_flow.Flow:
    prefix = server_prefix(server["index"])
    host_key = keys.scoped(prefix, keys.HOST)
    chain = linear_flow.Flow(prefix, retry=MemberCandidatesRetry(
        f"{prefix}-retry", member=server["name"], kind=SERVER, provides=host_key,
        member_id=server["id"], amounts=server["resources"]))
    chain.add(BootInstance(f"{prefix}-boot", rebind={"host": host_key}, inject={
                  "instance_uuids": [server["id"]], "index": 0,
                  "request_spec": {"resources": server["resources"],
                                   "image_id": server["image_id"]}}))
    return chain


def volume_chain(volume: dict) -> linear_flow.Flow:
    prefix = volume_prefix(volume["index"])
    backend_key = keys.scoped(prefix, keys.BACKEND)
    chain = linear_flow.Flow(prefix, retry=MemberCandidatesRetry(
        f"{prefix}-retry", member=volume["name"], kind=VOLUME, provides=backend_key,
        member_id=volume["id"], amounts={"DISK_GB": int(volume["size_gb"])}))
    chain.add(CreateVolume(f"{prefix}-create", rebind={"backend": backend_key}, inject={
                  "volume_id": volume["id"], "size_gb": int(volume["size_gb"]),
                  "volume_type": volume.get("volume_type")}))
    return chain


def member_batches(servers: list[dict], volumes: list[dict], batch: int
                   ) -> list[BuildMembers]:
    """The run's members in tasks of ``batch``, each named by its first member's place."""
    members = [(SERVER, s) for s in servers] + [(VOLUME, v) for v in volumes]
    width = max(4, len(str(len(members))))
    tasks = []
    for first in range(0, len(members), batch):
        group = members[first:first + batch]
        tasks.append(BuildMembers(f"batch-{first:0{width}d}",
                                  [m for kind, m in group if kind == SERVER],
                                  [m for kind, m in group if kind == VOLUME]))
    return tasks


@flow_factory("vcluster-build", listeners=(ReservationStatusListener,))
def build_flow(vcluster_id: str, run: str, servers: list[dict], volumes: list[dict],
               batch: int = 0) -> linear_flow.Flow:
    """Build ``servers`` and ``volumes`` (``{"index", "name", "id", ...}``) of one run.

    ``run`` (create or add) is also in the store as ``keys.VCLUSTER_RUN``; it
    is an argument so the flow's name says what it does. ``batch``: members
    per task; flows posted without it build a chain a member.
    """
    indexes = {"servers": [s["index"] for s in servers],
               "volumes": [v["index"] for v in volumes]}
    flow = linear_flow.Flow(f"vcluster-{run}-{vcluster_id}")
    place = linear_flow.Flow("place", retry=ScheduleRetry("schedule-retry"))
    place.add(ScheduleVCluster("schedule", inject=indexes), ClaimVCluster("claim-all"))
    members = unordered_flow.Flow("members")
    if batch:
        members.add(*member_batches(servers, volumes, batch))
    else:
        members.add(*[server_chain(s) for s in servers], *[volume_chain(v) for v in volumes])
    flow.add(VClusterLifecycle("vcluster-lifecycle", inject=indexes), place)
    if servers or volumes:
        flow.add(members)
    flow.add(AttachVolumes("attach"), FinishVCluster("finish"))
    return flow
