"""The vcluster teardown flow: members removed by an update, or the whole cluster.

    detach                     every attachment that involves a leaving member
    volumes (unordered)
      del-vol-0000 ...         delete from the backend, free the allocation
    servers (unordered)
      del-srv-0000 ...         destroy the guest, free the allocation, leave the groups
    finish-teardown            remove: ACTIVE again; delete: groups gone, DELETED

Never reverted: a teardown that stops is resumed by an operator.
"""

from __future__ import annotations

from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.flows.registry import flow_factory
from fleetflow.flows.tasks.teardown import DeleteInstance
from fleetflow.flows.tasks.vcluster_teardown import (
    DeleteMemberVolume,
    DetachLeaving,
    FinishTeardown,
)


@flow_factory("vcluster-teardown")
def teardown_flow(vcluster_id: str, run: str, servers: list[dict], volumes: list[dict]
                  ) -> linear_flow.Flow:
    """Take ``servers`` and ``volumes`` (``{"index", "id"}``) out of the cluster
    (``run``: remove or delete, also in the store as ``keys.VCLUSTER_RUN``)."""
    indexes = {"servers": [s["index"] for s in servers],
               "volumes": [v["index"] for v in volumes]}
    flow = linear_flow.Flow(f"vcluster-{run}-{vcluster_id}")
    flow.add(DetachLeaving("detach", inject=indexes))
    if volumes:
        deletes = unordered_flow.Flow("volumes")
        for volume in volumes:
            deletes.add(DeleteMemberVolume(f"del-vol-{volume['index']:04d}",
                                           inject={"volume_id": volume["id"]}))
        flow.add(deletes)
    if servers:
        destroys = unordered_flow.Flow("servers")
        for server in servers:
            destroys.add(DeleteInstance(f"del-srv-{server['index']:04d}",
                                        inject={"instance_id": server["id"]}))
        flow.add(destroys)
    flow.add(FinishTeardown("finish-teardown", inject=indexes))
    return flow
