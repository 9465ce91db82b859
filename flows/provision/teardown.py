"""The reservation teardown flow: delete instances (a whole reservation, or one server).

    delete (unordered)
      del-0000 ... del-NNNN     guest, volume, allocation, group membership
    finish-teardown             the reservation DELETED when nothing is left
"""

from __future__ import annotations

from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.flows.provision.teardown_tasks import DeleteInstance, FinishReservationTeardown
from fleetflow.flows.registry import flow_factory


# Registered as "teardown" before: flows saved under that name still resume.
@flow_factory("reservation-teardown", aliases=("teardown",))
def teardown_flow(instance_ids: list[str], reservation_id: str | None = None
                  ) -> linear_flow.Flow:
    """Delete ``instance_ids``; then settle the reservation's status."""
    width = max(4, len(str(len(instance_ids) - 1)))
    flow = linear_flow.Flow(f"teardown-{reservation_id or instance_ids[0]}")
    deletes = unordered_flow.Flow("delete")
    for index, instance_id in enumerate(instance_ids):
        deletes.add(DeleteInstance(f"del-{index:0{width}d}",
                                   inject={"instance_id": instance_id}))
    flow.add(deletes, FinishReservationTeardown("finish-teardown",
                                                inject={"reservation_id": reservation_id}))
    return flow
