"""The vcluster teardown flow: members removed by an update, or the whole cluster.

    detach                     every attachment that involves a leaving member
    members (unordered)
      del-vol-0000 ...         delete from the backend
      del-srv-0000 ...         destroy the guest
                               (with ``batch``: del-vols-0000 ..., del-srvs-0000 ...,
                               a task a group of that many)
    release                    every allocation in one write; rows DELETED, groups left
    finish-teardown            remove: ACTIVE again; delete: groups gone, DELETED

Never reverted: a teardown that stops is resumed by an operator.
"""

from __future__ import annotations

from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.flows.registry import flow_factory
from fleetflow.flows.status_listener import ReservationStatusListener
from fleetflow.flows.vcluster.teardown_tasks import (
    DeleteMemberVolume,
    DeleteMemberVolumes,
    DestroyMemberServer,
    DestroyMemberServers,
    DetachLeaving,
    FinishVClusterTeardown,
    ReleaseLeaving,
)


@flow_factory("vcluster-teardown", listeners=(ReservationStatusListener,))
def teardown_flow(vcluster_id: str, run: str, servers: list[dict], volumes: list[dict],
                  batch: int = 1) -> linear_flow.Flow:
    """Take ``servers`` and ``volumes`` (``{"index", "id"}``) out of the cluster
    (``run``: remove or delete, also in the store as ``keys.VCLUSTER_RUN``).
    ``batch``: members of each kind a task, each group named by its first member;
    flows submitted without it keep a task a member."""
    indexes = {"servers": [s["index"] for s in servers],
               "volumes": [v["index"] for v in volumes]}
    flow = linear_flow.Flow(f"vcluster-{run}-{vcluster_id}")
    flow.add(DetachLeaving("detach", inject=indexes))
    if servers or volumes:
        members = unordered_flow.Flow("members")
        if batch > 1:
            for first in range(0, len(volumes), batch):
                group = volumes[first:first + batch]
                members.add(DeleteMemberVolumes(f"del-vols-{group[0]['index']:04d}", inject={
                    "volume_ids": [v["id"] for v in group]}))
            for first in range(0, len(servers), batch):
                group = servers[first:first + batch]
                members.add(DestroyMemberServers(f"del-srvs-{group[0]['index']:04d}", inject={
                    "instance_ids": [s["id"] for s in group]}))
        else:
            for volume in volumes:
                members.add(DeleteMemberVolume(f"del-vol-{volume['index']:04d}",
                                               inject={"volume_id": volume["id"]}))
            for server in servers:
                members.add(DestroyMemberServer(f"del-srv-{server['index']:04d}",
                                                inject={"instance_id": server["id"]}))
        flow.add(members)
    flow.add(ReleaseLeaving("release", inject=indexes),
             FinishVClusterTeardown("finish-teardown", inject=indexes))
    return flow
