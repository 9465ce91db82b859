"""The audit's status check: does a row's status agree with its members and its flow?

A reservation, a vcluster and an evacuation each say in one status what their
flow did to their members. The flow writes that status itself (its first and
last atoms, and the status listener), so a status that disagrees with the
members, or a row still "in progress" whose flow is over, means a write was
lost or a flow stopped before its end: the reservation BUILDING with every
instance ACTIVE that nothing will ever finish. One ``status_mismatch`` each:

- a reservation PENDING, SCHEDULING, BUILDING or REVERTING whose flow is
  over, or every one of whose instances has settled (ACTIVE, ERROR, REVERTED,
  DELETED) while its flow makes no progress; DELETING while every instance
  is gone and nothing changed for the grace period; ACTIVE while an instance
  is ERROR or REVERTED (whatever the policy: the last atom writes ACTIVE only
  when every instance is; a server deleted on its own since is DELETED, and
  leaves the reservation ACTIVE); DELETED while an instance is not gone;
- a vcluster running a flow (BUILDING, UPDATING, DELETING ...) whose current
  flow is over; ACTIVE with a member that is not ACTIVE, AVAILABLE or IN-USE;
  DELETED with a member that is not;
- an evacuation PENDING, RUNNING or REVERTING whose current flow is over.

A row still in progress whose current flow ended FAILURE is reported as a
``stranded_operation`` instead: that flow did not run to its end, it stopped
half way (a revert raised, or its engine failed), and no conductor ever runs
a FAILURE flow again by itself. What it held stays held (allocations, server
groups, members half undone) until an operator runs ``fleetflow flows revert``
(or ``resume``) on it, which retries the revert that raised and carries on
(engine/actions.py).

Work in flight is left alone: a flow that is unfinished and progressed within
the grace period (:mod:`.flows`), members in transitional states. A
row whose flow detail is unknown (not saved yet, or kept elsewhere) is judged
by its members alone, once neither it nor they changed for the grace period.
What is reported is read again at the end: a row that moved on meanwhile was
caught between two writes, not stuck.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.persistence.models import (
    Evacuation,
    Instance,
    Reservation,
    VCluster,
    VClusterMember,
    Volume,
)
from fleetflow.services.audit import flows as audit_flows
from fleetflow.services.audit.flows import age, ago

KINDS = {
    "status_mismatch": "a reservation, vcluster or evacuation whose status disagrees with "
                       "its members or its flow (e.g. BUILDING with every instance ACTIVE, "
                       "or still running a flow that is over)",
    "stranded_operation": "a reservation, vcluster or evacuation still in progress "
                          "(e.g. REVERTING) whose flow ended FAILURE half way: nothing "
                          "runs it again until an operator reverts or resumes the flow",
}
STRANDED, MISMATCH = "stranded_operation", "status_mismatch"

RESERVATION_BUSY = frozenset({states.PENDING, states.SCHEDULING, states.BUILDING,
                              states.REVERTING})
INSTANCE_SETTLED = frozenset({states.ACTIVE, states.ERROR, states.REVERTED, states.DELETED})
GONE = frozenset({states.DELETED, states.REVERTED})
# An instance or volume a flow is working on now (its own flow settles it).
MEMBER_IN_FLIGHT = frozenset({states.PENDING, states.SCHEDULING, states.BUILDING,
                              states.REVERTING, states.DELETING, states.VOLUME_CREATING})
# An ACTIVE vcluster's members are all usable.
MEMBER_OK = frozenset({states.ACTIVE, states.VOLUME_AVAILABLE, states.VOLUME_IN_USE})
EVACUATION_BUSY = frozenset({states.PENDING, states.RUNNING, states.REVERTING})


def _tally(counts: Counter) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def check_status(add, database, grace_s: float, now=None) -> dict[str, int]:
    """Report ``status_mismatch`` and ``stranded_operation`` through ``add(kind, subject,
    detail)``; returns counts."""
    now = now or audit_flows.utcnow()
    # model -> row id -> (status read, detail, kind)
    found: dict[type, dict[str, tuple[str, str, str]]] = {m: {} for m in (Reservation, VCluster,
                                                                      Evacuation)}
    with database.read_session() as session:
        reservations = session.execute(sa.select(
            Reservation.id, Reservation.status, Reservation.flow_id, Reservation.updated_at)
            .where(Reservation.status.in_(
                (*RESERVATION_BUSY, states.ACTIVE, states.DELETING, states.DELETED)))).all()
        members: dict[str, Counter] = defaultdict(Counter)
        changed = {}
        for reservation_id, status, count, last in session.execute(
                sa.select(Instance.reservation_id, Instance.status, sa.func.count(),
                          sa.func.max(Instance.updated_at))
                .where(Instance.reservation_id.is_not(None))
                .group_by(Instance.reservation_id, Instance.status)):
            members[reservation_id][status] = count
            changed[reservation_id] = max(filter(None, (changed.get(reservation_id), last)),
                                          default=None)
        vclusters = session.execute(sa.select(VCluster.id, VCluster.status, VCluster.flow_id)
                                    .where(VCluster.status.in_(states.VCLUSTER_BUSY))).all()
        evacuations = session.execute(sa.select(Evacuation.id, Evacuation.status,
                                                Evacuation.flow_id)
                                      .where(Evacuation.status.in_(EVACUATION_BUSY))).all()
        flows = audit_flows.flows_by_uuid(session, [
            *(r.flow_id for r in reservations if r.status in RESERVATION_BUSY),
            *(v.flow_id for v in vclusters), *(e.flow_id for e in evacuations)])
        vcluster_members = _vcluster_members(session)
    for row in reservations:
        flow = flows.get(row.flow_id)
        if row.status in RESERVATION_BUSY and _failed(flow):
            found[Reservation][row.id] = (row.status, _stranded("reservation", row, flow),
                                          STRANDED)
            continue
        detail = _reservation(row, members.get(row.id, Counter()), flow,
                              changed.get(row.id), now, grace_s)
        if detail:
            found[Reservation][row.id] = (row.status, detail, MISMATCH)
    for model, kind, rows in ((VCluster, "vcluster", vclusters),
                              (Evacuation, "evacuation", evacuations)):
        for row in rows:
            flow = flows.get(row.flow_id)
            if _failed(flow):
                found[model][row.id] = (row.status, _stranded(kind, row, flow), STRANDED)
            elif flow is not None and flow.settled:
                found[model][row.id] = (row.status, f"{kind} {row.status} but its flow "
                                                    f"{flow.uuid} is {flow.state}", MISMATCH)
    for vcluster_id, (status, detail) in _vcluster_members_disagree(vcluster_members).items():
        found[VCluster].setdefault(vcluster_id, (status, detail, MISMATCH))
    _report(add, database, found)
    return {"reservations": len(reservations), "evacuations_busy": len(evacuations)}


def _failed(flow) -> bool:
    return flow is not None and flow.state == tf_states.FAILURE


def _stranded(kind: str, row, flow) -> str:
    return (f"{kind} {row.status} but its flow {flow.uuid} ended FAILURE half way (a "
            "revert raised, or its engine failed) and nothing runs it again: "
            f"'fleetflow flows revert {flow.uuid}' finishes undoing it")


def _reservation(row, instances: Counter, flow, changed, now, grace_s: float) -> str | None:
    """Why reservation ``row`` disagrees with its instances or its flow; None if it does not."""
    total = sum(instances.values())
    if row.status in RESERVATION_BUSY:
        if flow is not None and flow.settled:
            return (f"reservation {row.status} but its flow {flow.uuid} is {flow.state}"
                    + (f" ({_tally(instances)})" if total else ""))
        if not total or set(instances) - INSTANCE_SETTLED:
            return None  # still being built or reverted: its flow's business
        if flow is not None:
            if flow.in_flight(now, grace_s):
                return None
            return (f"reservation {row.status} but every instance has settled "
                    f"({_tally(instances)}); its flow {flow.uuid} is {flow.state}, no "
                    f"progress since {ago(now, flow.last_progress)}")
        last = max(filter(None, (row.updated_at, changed)), default=None)
        if age(now, last) < grace_s:
            return None
        return (f"reservation {row.status} but every instance has settled "
                f"({_tally(instances)}); no change since {ago(now, last)}")
    if row.status == states.DELETING:
        last = max(filter(None, (row.updated_at, changed)), default=None)
        if total and not set(instances) - GONE and age(now, last) >= grace_s:
            return (f"reservation DELETING but every instance is gone ({_tally(instances)}); "
                    f"no change since {ago(now, last)}")
        return None
    if row.status == states.ACTIVE:
        wrong = Counter({s: n for s, n in instances.items()
                         if s not in MEMBER_IN_FLIGHT and s not in (states.ACTIVE,
                                                                    states.DELETED)})
        if wrong:
            return (f"reservation ACTIVE but {sum(wrong.values())} of {total} instances "
                    f"are not ({_tally(wrong)})")
        return None
    live = Counter({s: n for s, n in instances.items() if s not in GONE})
    if live:  # DELETED
        return (f"reservation DELETED but {sum(live.values())} of {total} instances are not "
                f"gone ({_tally(live)})")
    return None


def _vcluster_members(session) -> list:
    """Members of ACTIVE vclusters, and those of DELETED ones not gone: ONE query."""
    member = VClusterMember
    status = sa.func.coalesce(Instance.status, Volume.status).label("status")
    return session.execute(
        sa.select(member.vcluster_id, VCluster.status.label("vcluster_status"), member.name,
                  member.kind, status)
        .join(VCluster, VCluster.id == member.vcluster_id)
        .outerjoin(Instance, sa.and_(member.kind == states.MEMBER_SERVER,
                                     Instance.id == member.resource_id))
        .outerjoin(Volume, sa.and_(member.kind == states.MEMBER_VOLUME,
                                   Volume.id == member.resource_id))
        .where(sa.or_(VCluster.status == states.ACTIVE,
                      sa.and_(VCluster.status == states.DELETED,
                              sa.func.coalesce(Instance.status, Volume.status)
                              .not_in(tuple(GONE)))))
        .order_by(member.vcluster_id, member.kind, member.name)).all()


def _vcluster_members_disagree(rows) -> dict[str, tuple[str, str]]:
    wrong: dict[str, list[str]] = defaultdict(list)
    status_of = {}
    for row in rows:
        status_of[row.vcluster_id] = row.vcluster_status
        if row.vcluster_status == states.ACTIVE:
            if row.status in MEMBER_OK or row.status in MEMBER_IN_FLIGHT:
                continue
        elif row.status is None or row.status in GONE:  # DELETED
            continue
        wrong[row.vcluster_id].append(f"{row.name} ({row.kind}) is {row.status or 'missing'}")
    return {vcluster_id: (status_of[vcluster_id],
                          f"vcluster {status_of[vcluster_id]} but member "
                          + "; ".join(found[:5]) + (f"; and {len(found) - 5} more"
                                                    if len(found) > 5 else ""))
            for vcluster_id, found in wrong.items()}


def _report(add, database, found: dict) -> None:
    """Add what ``found`` holds, except rows whose status changed since it was read."""
    if not any(found.values()):
        return
    with database.read_session() as session:
        for model, by_id in found.items():
            ids = sorted(by_id)
            now = {}
            for start in range(0, len(ids), audit_flows.CHUNK):
                now.update(session.execute(sa.select(model.id, model.status).where(
                    model.id.in_(ids[start:start + audit_flows.CHUNK]))).all())
            for row_id in ids:
                status, detail, kind = by_id[row_id]
                if now.get(row_id) == status:
                    add(kind, row_id, detail)
