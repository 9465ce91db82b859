"""Lifecycle markers: the first and last atoms of a reservation's flow.

The first does nothing going forward and, on revert, writes the outcome the
operator sees (docs/architecture.md, "A revert leaves an outcome the operator
can read"): the reservation REVERTED with the fault that caused it, and every
instance REVERTED. The last decides ACTIVE or PARTIAL.
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


def failure_summary(session, reservation_id: str) -> dict | None:
    """One fault for the instances that did not become ACTIVE, or None when all did.

    Its code is their most common fault's; its message counts them and quotes
    one message per code, e.g. ``2 of 10 instances did not become ACTIVE:
    2 NO_VALID_HOST (No valid host for instance 9 ...)``.
    """
    total, failed, by_code, example = 0, 0, {}, {}
    for status, fault in session.execute(sa.select(Instance.status, Instance.fault).where(
            Instance.reservation_id == reservation_id).order_by(Instance.index)):
        total += 1
        if status == states.ACTIVE:
            continue
        failed += 1
        code = (fault or {}).get("code") or "UNKNOWN"
        by_code[code] = by_code.get(code, 0) + 1
        example.setdefault(code, (fault or {}).get("message") or status)
    if not failed:
        return None
    codes = sorted(by_code, key=lambda c: (-by_code[c], c))
    causes = "; ".join(f"{by_code[c]} {c} ({example[c]})" for c in codes)
    return rows.fault(codes[0], f"{failed} of {total} instances did not become ACTIVE: "
                                f"{causes}")


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

    A PARTIAL reservation's fault sums up why the others failed (failure_summary).

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
            fault = failure_summary(session, reservation_id) if status == states.PARTIAL else None
            rows.set_status(session, reservation_id, status, fault=fault,
                            clear_fault=status == states.ACTIVE)
        return status
