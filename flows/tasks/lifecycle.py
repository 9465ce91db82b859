"""Lifecycle markers: the first and last atoms of a reservation's flow.

The first does nothing going forward and, on revert, writes the outcome the
operator sees (STYLE point 6): the reservation REVERTED with the fault that
caused it, and every instance REVERTED. The last decides ACTIVE or PARTIAL.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.exceptions import FleetflowError
from fleetflow.flows import runtime
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Instance


class NotEnoughInstances(FleetflowError):
    """Fewer than min_count instances became ACTIVE (best-effort)."""

    code = "NOT_ENOUGH_INSTANCES"
    status = 409


def _first_fault(session, reservation_id: str) -> dict | None:
    # A fault written back to None is stored as JSON null, not SQL NULL.
    stored = sa.func.coalesce(sa.cast(Instance.fault, sa.Text), "null")
    return session.execute(sa.select(Instance.fault).where(
        Instance.reservation_id == reservation_id, stored != "null")
        .order_by(Instance.updated_at.desc()).limit(1)).scalar_one_or_none()


class MarkReservationRevertedOnRevert(FleetTask):
    """Nothing on execute.

    Revert: the reservation and its instances become REVERTED; the
    reservation keeps the first fault that explains why.
    """

    def execute(self, reservation_id: str) -> None:
        return None

    def revert(self, reservation_id: str, flow_failures=None, **kwargs) -> None:
        rt = runtime.get()
        with rt.database.session() as session:
            reservation = rows.get(session, reservation_id)
            fault = reservation.fault or _first_fault(session, reservation_id)
            if fault is None and flow_failures:
                failure = next(iter(flow_failures.values()))
                code = getattr(failure.exception, "code", None) or "FLOW_FAILED"
                fault = rows.fault(code, failure.exception_str)
            rows.update_instances(session, rows.instance_ids(session, reservation_id),
                                  status=states.REVERTED, task_state=None)
            rows.set_status(session, reservation_id, states.REVERTED, fault=fault)


class FinishReservation(FleetTask):
    """ACTIVE when every instance is; PARTIAL (best-effort) when at least min_count are.

    Fewer than min_count: raises, and the whole reservation reverts.

    Revert: nothing of its own (the marker writes REVERTED).
    """

    def execute(self, reservation_id: str, request_spec: dict) -> str:
        rt = runtime.get()
        with rt.database.session() as session:
            progress = rows.progress(session, reservation_id)
            if progress["active"] < request_spec["min_count"]:
                fault = _first_fault(session, reservation_id)
                raise NotEnoughInstances(
                    f"{progress['active']} of {progress['total']} instances became ACTIVE; "
                    f"min_count is {request_spec['min_count']}"
                    + (f" (last fault: {fault['message']})" if fault else ""))
            status = (states.ACTIVE if progress["active"] == progress["total"]
                      else states.PARTIAL)
            rows.set_status(session, reservation_id, status, clear_fault=status == states.ACTIVE)
        return status
