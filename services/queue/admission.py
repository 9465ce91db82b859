"""One admission pass: which queued requests start now, from one view of the cloud.

A pass reads the head of the queue (``[queue] scan_depth`` entries in
priority-then-age order), one snapshot of the cloud, and places each request
on it in turn, as a dry run would: a request that fits (all of it, or
``min_count`` for best-effort) is admitted — its instance rows and flow
intent are written, and what it takes is added to the snapshot so the
requests after it see less. Nothing is claimed while a request waits: its
flow schedules and claims as a fitting request's does. Cost: one snapshot and
at most ``scan_depth`` scheduling attempts, whatever the queue's length.

Order and fairness:

* Priority first (higher first), then — with ``[queue] fair_share`` — a
  project above its share of the vCPUs in use (the mean of the projects in
  the pass) behind one at or below it, then arrival (``seq``): two requests
  of one project and one priority are never reordered.
* Backfill: a request behind one that does not fit (the *head*) may go
  first. Each time it happens, every blocked request ahead counts a bypass.
  Once the head counted ``[queue] max_bypass`` of them, or waited
  ``[queue] reserve_after`` seconds, the hosts it could use are held back:
  requests behind it may only take hosts it could never use.
* Quotas count at admission: a request the project's quota cannot hold now
  stays queued, with the quota's message as its ``why``.
* Admitted ones whose flow has not claimed yet are placed on the snapshot
  first, so a pass never hands the same free capacity out twice.

Two passes never run at once in one deployment (the admitter's lease), and
admission is a conditional UPDATE (``QUEUED`` -> ``PENDING``), so a request is
never admitted twice even if they did.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import sqlalchemy as sa

from fleetflow.common import crash_points, states
from fleetflow.persistence import queue as queue_rows
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Flavor, Instance, Reservation, utcnow
from fleetflow.persistence.placement import allocations
from fleetflow.persistence.placement.models import Allocation
from fleetflow.scheduler import plan, scheduler
from fleetflow.scheduler.filters import run_filters
from fleetflow.scheduler.result import NoValidHost
from fleetflow.scheduler.snapshot import snapshot_from_db

LOG = logging.getLogger(__name__)

QUEUE_TIMEOUT = "QUEUE_TIMEOUT"
# The crash point's atom name.
ADMISSION_ATOM = "queue-admission"
# A reservation admitted but whose flow has not claimed everything yet.
_UNCLAIMED = (states.PENDING, states.SCHEDULING, states.BUILDING)


@dataclasses.dataclass
class PassResult:
    examined: int = 0
    admitted: list[str] = dataclasses.field(default_factory=list)
    expired: list[str] = dataclasses.field(default_factory=list)
    head: str | None = None
    held: int = 0  # hosts held back for the head


@dataclasses.dataclass
class _Candidate:
    seq: int
    ref_id: str
    tenant_id: str
    priority: int
    created_at: object
    deadline: object
    bypassed: int
    spec: dict


def _tenant_vcpus(session, tenants: set[str]) -> dict[str, int]:
    live = sa.not_(Instance.status.in_((states.DELETED, states.REVERTED)))
    used = dict(session.execute(
        sa.select(Instance.tenant_id, sa.func.coalesce(sa.func.sum(Flavor.vcpus), 0))
        .join(Flavor, Flavor.id == Instance.flavor_id)
        .where(Instance.tenant_id.in_(tenants), live).group_by(Instance.tenant_id)).all())
    return {t: int(used.get(t, 0)) for t in tenants}


def order(candidates: list[_Candidate], vcpus: dict[str, int] | None) -> list[_Candidate]:
    """Priority, then (with usage given) projects at or below their share, then age."""
    above: dict[str, bool] = {}
    if vcpus and len(vcpus) > 1:
        share = sum(vcpus.values()) / len(vcpus)
        above = {t: used > share for t, used in vcpus.items()}
    return sorted(candidates, key=lambda c: (-c.priority, above.get(c.tenant_id, False), c.seq))


def _reserved(conf, candidate: _Candidate, now) -> bool:
    if candidate.bypassed >= conf.queue.max_bypass:
        return True
    waited = (now - candidate.created_at).total_seconds()
    return bool(conf.queue.reserve_after) and waited >= conf.queue.reserve_after


def _usable_hosts(session, spec: dict, snapshot) -> set[str]:
    """Hosts the request could ever use: its filters, whatever their usage."""
    req = dataclasses.replace(plan.request_spec(session, spec, []), resources={},
                              volume_gb=None)
    hosts, _ = run_filters(req, snapshot.hosts)
    return {h.name for h in hosts}


def _place_unclaimed(session, snapshot, entries, requests, conf) -> list[str]:
    """Put what admitted requests will claim on ``snapshot``; returns entries done with."""
    done = []
    for entry in entries:
        reservation = requests.get(entry.ref_id)
        if reservation is None or reservation.status not in _UNCLAIMED:
            done.append(entry.ref_id)
            continue
        uuids = rows.instance_ids(session, entry.ref_id)
        claimed = set(session.scalars(sa.select(Allocation.consumer_uuid).distinct().where(
            Allocation.consumer_uuid.in_(uuids))))
        left = [u for u in uuids if u not in claimed]
        if not left:
            if reservation.status != states.PENDING:
                done.append(entry.ref_id)
            continue
        spec = reservation.request["spec"]
        req = plan.request_spec(session, spec, left, count=len(left))
        req.min_count = 1
        try:
            placement = scheduler.schedule(req, snapshot, alternates=0,
                                           weigher=conf.scheduler.weigher)
        except NoValidHost:
            continue
        for p in placement.instances:
            snapshot.add_usage(p.host, req.resources)
    return done


def run_pass(conf, database, ops, now=None) -> PassResult:
    """One pass over the head of the queue; ``ops`` is the ReservationOps that admits."""
    now = now or utcnow()
    result = PassResult()
    with database.session() as session:
        entries = queue_rows.head(session, conf.queue.scan_depth)
        unclaimed = queue_rows.admitted(session, queue_rows.KIND_RESERVATION)
        expired_beyond = [e for e in queue_rows.expired(session, now, 100)
                          if e.seq not in {x.seq for x in entries}]
        wanted = [e.ref_id for e in entries + unclaimed + expired_beyond]
        requests = {r.id: r for r in session.scalars(
            sa.select(Reservation).where(Reservation.id.in_(wanted)))} if wanted else {}
        queue_rows.remove(session, queue_rows.KIND_RESERVATION,
                          [e.ref_id for e in entries
                           if getattr(requests.get(e.ref_id), "status", None) != states.QUEUED])
        for entry in expired_beyond:
            _expire(session, entry.ref_id, entry.why or "not examined yet: too many requests "
                                                       "ahead", result)
        candidates = [
            _Candidate(e.seq, e.ref_id, e.tenant_id, e.priority, e.created_at, e.deadline,
                       e.bypassed, requests[e.ref_id].request["spec"])
            for e in entries if getattr(requests.get(e.ref_id), "status", None) == states.QUEUED]
        if not candidates:
            queue_rows.remove(session, queue_rows.KIND_RESERVATION,
                              _done_unclaimed(session, unclaimed, requests))
            return result
        usage = allocations.usages_by_provider(session)
        snapshot = snapshot_from_db(session, usage, plan.recent_failures(session),
                                    storage=any(c.spec.get("volume_gb") for c in candidates))
        queue_rows.remove(session, queue_rows.KIND_RESERVATION,
                          _place_unclaimed(session, snapshot, unclaimed, requests, conf))
        vcpus = (_tenant_vcpus(session, {c.tenant_id for c in candidates})
                 if conf.queue.fair_share else None)
        _admit_in_order(session, conf, ops, order(candidates, vcpus), snapshot, now, result)
    return result


def _done_unclaimed(session, unclaimed, requests) -> list[str]:
    return [e.ref_id for e in unclaimed
            if getattr(requests.get(e.ref_id), "status", None) not in _UNCLAIMED]


def _admit_in_order(session, conf, ops, candidates, snapshot, now, result) -> None:
    whys: dict[int, str] = {}
    blocked: list[int] = []  # seqs of the requests ahead that did not fit
    held: set[str] = set()
    # Queues hold many equal requests: one that did not fit answers for its
    # equals until the snapshot or the held hosts change.
    refused: dict[tuple, NoValidHost] = {}
    for candidate in candidates:
        result.examined += 1
        key = (json.dumps(candidate.spec, sort_keys=True), bool(held))
        req = plan.request_spec(session, candidate.spec, [], excluded_hosts=sorted(held))
        try:
            if key in refused:
                raise refused[key]
            placement = scheduler.schedule(req, snapshot, alternates=0,
                                           weigher=conf.scheduler.weigher)
        except NoValidHost as exc:
            refused[key] = exc
            if candidate.deadline is not None and candidate.deadline <= now:
                _expire(session, candidate.ref_id, exc.message, result)
                continue
            whys[candidate.seq] = exc.message
            blocked.append(candidate.seq)
            if result.head is None:
                result.head = candidate.ref_id
                if _reserved(conf, candidate, now):
                    held = _usable_hosts(session, candidate.spec, snapshot)
                    result.held = len(held)
            continue
        try:
            with session.begin_nested():
                admitted = ops.admit(session, candidate.ref_id)
                crash_points.maybe_crash(ADMISSION_ATOM, crash_points.DURING_ADMISSION)
        except rows.QuotaExceeded as exc:
            whys[candidate.seq] = exc.message
            continue
        if not admitted:
            continue
        for p in placement.instances:
            snapshot.add_usage(p.host, req.resources)
        refused.clear()
        queue_rows.mark_admitted(session, candidate.seq)
        queue_rows.note_bypassed(session, blocked)
        result.admitted.append(candidate.ref_id)
    queue_rows.note_attempts(session, whys)


def _expire(session, reservation_id: str, why: str, result: PassResult) -> None:
    fault = rows.fault(QUEUE_TIMEOUT, f"queue_timeout ran out before it fitted: {why}",
                       step="queue")
    if rows.move_status(session, reservation_id, states.QUEUED, states.EXPIRED, fault=fault):
        result.expired.append(reservation_id)
    queue_rows.remove(session, queue_rows.KIND_RESERVATION, [reservation_id])
