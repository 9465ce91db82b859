"""The reservation teardown flow: delete instances (a whole reservation, or one server).

    delete (unordered)
      del-0000 ... del-NNNN     guest, volume, allocation, group membership
    finish-teardown             the reservation DELETED when nothing is left

With ``batch`` (more instances than ``[conductor] instances_per_atom``), the
deletes are groups of that many, each named by its first instance:
``delete-0000``, ``delete-0100``, ... (:class:`DeleteInstances`).
"""

from __future__ import annotations

from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.flows.provision.teardown_tasks import (
    DeleteInstance,
    DeleteInstances,
    FinishReservationTeardown,
)
from fleetflow.flows.registry import flow_factory


# Registered as "teardown" before: flows saved under that name still resume.
@flow_factory("reservation-teardown", aliases=("teardown",))
def teardown_flow(instance_ids: list[str], reservation_id: str | None = None,
                  batch: int = 1) -> linear_flow.Flow:
    """Delete ``instance_ids``; then settle the reservation's status. ``batch``:
    instances per task; flows submitted without it keep one task an instance."""
    width = max(4, len(str(len(instance_ids) - 1)))
    flow = linear_flow.Flow(f"teardown-{reservation_id or instance_ids[0]}")
    deletes = unordered_flow.Flow("delete")
    if batch > 1:
        for first in range(0, len(instance_ids), batch):
            deletes.add(DeleteInstances(f"delete-{first:0{width}d}", inject={
                "instance_ids": instance_ids[first:first + batch]}))
    else:
        for index, instance_id in enumerate(instance_ids):
            deletes.add(DeleteInstance(f"del-{index:0{width}d}",
                                       inject={"instance_id": instance_id}))
    flow.add(deletes, FinishReservationTeardown("finish-teardown",
                                                inject={"reservation_id": reservation_id}))
    return flow
