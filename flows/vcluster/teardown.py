"""The vcluster teardown flow: members removed by an update, or the whole cluster.

    detach                     every attachment that involves a leaving member
    members (unordered)
      del-vol-0000 ...         delete from the backend
      del-srv-0000 ...         destroy the guest
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
    DestroyMemberServer,
    DetachLeaving,
    FinishVClusterTeardown,
    ReleaseLeaving,
)


@flow_factory("vcluster-teardown", listeners=(ReservationStatusListener,))
def teardown_flow(vcluster_id: str, run: str, servers: list[dict], volumes: list[dict]
                  ) -> linear_flow.Flow:
    """Take ``servers`` and ``volumes`` (``{"index", "id"}``) out of the cluster
    (``run``: remove or delete, also in the store as ``keys.VCLUSTER_RUN``)."""
    indexes = {"servers": [s["index"] for s in servers],
               "volumes": [v["index"] for v in volumes]}
    flow = linear_flow.Flow(f"vcluster-{run}-{vcluster_id}")
    flow.add(DetachLeaving("detach", inject=indexes))
    if servers or volumes:
        members = unordered_flow.Flow("members")
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
