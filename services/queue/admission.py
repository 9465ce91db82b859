"""One admission pass: which queued requests start now, from one view of the cloud.

A pass reads the head of the queue (``[queue] scan_depth`` entries in
priority-then-age order, reservations and virtual clusters alike), one
snapshot of the cloud, and places each request on it in turn, as a dry run
would (``kinds.py``): a request that fits (all of it, or
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

Transactions: the queue's clean-up first (requests gone, expired), then the
places are read in one read transaction and each admission commits on its own
(its status, rows and flow intent together), so its flow starts at once
instead of after the whole pass, and a pass holds no write lock while it
places. A process killed during an admission leaves nothing of that one; the
ones before it are complete. Two passes never run at once in one deployment
(the admitter's lease), and admission is a conditional UPDATE (``QUEUED`` ->
``PENDING``), so a request is never admitted twice even if they did.

``memo`` (the admitter keeps one, :class:`Memo`): the fleet's snapshot read
again only where hosts changed, and where each admitted-but-unclaimed request
was placed, reused while it has claimed nothing more.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import sqlalchemy as sa

from fleetflow.common import crash_points, states
from fleetflow.persistence import queue as queue_rows
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Flavor, Instance, utcnow
from fleetflow.persistence.placement import allocations
from fleetflow.scheduler import plan
from fleetflow.scheduler.snapshot import snapshot_from_db
from fleetflow.services.queue.kinds import KINDS, UNCLAIMED, refusal_key
from fleetflow.services.queue.snapshots import SnapshotCache

LOG = logging.getLogger(__name__)

QUEUE_TIMEOUT = "QUEUE_TIMEOUT"
# The crash point's atom name.
ADMISSION_ATOM = "queue-admission"


@dataclasses.dataclass
class PassResult:
    examined: int = 0
    admitted: list[str] = dataclasses.field(default_factory=list)
    expired: list[str] = dataclasses.field(default_factory=list)
    head: str | None = None
    held: int = 0  # hosts held back for the head
    # (candidate, why) out of patience in this pass: expired once it has placed
    expiring: list = dataclasses.field(default_factory=list)


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
    kind: str = queue_rows.KIND_RESERVATION


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


def _ops_by_kind(ops) -> Mapping:
    # One ReservationOps (reservations only), or {kind: ops}.
    return ops if isinstance(ops, Mapping) else {queue_rows.KIND_RESERVATION: ops}


def _load(session, entries) -> dict[tuple[str, str], object]:
    """The requests' own rows, by (kind, id)."""
    found: dict[tuple[str, str], object] = {}
    for name, kind in KINDS.items():
        wanted = [e.ref_id for e in entries if e.kind == name]
        if wanted:
            found.update(((name, r.id), r) for r in session.scalars(
                sa.select(kind.model).where(kind.model.id.in_(wanted))))
    return found


def _status(requests, entry) -> str | None:
    return getattr(requests.get((entry.kind, entry.ref_id)), "status", None)


def _remove(session, entries) -> None:
    for name in KINDS:
        queue_rows.remove(session, name, [e.ref_id for e in entries if e.kind == name])


@dataclasses.dataclass
class Memo:
    """What an admitter keeps between its passes (see the module's docstring)."""

    snapshots: SnapshotCache = dataclasses.field(default_factory=SnapshotCache)
    # (kind, ref_id, instances left to claim) -> hosts and resources it takes
    unclaimed: dict[tuple, list] = dataclasses.field(default_factory=dict)


def run_pass(conf, database, ops, now=None, memo: Memo | None = None) -> PassResult:
    """One pass over the head of the queue; ``ops`` admits (``{kind: ops}``, or one
    ReservationOps for reservations only)."""
    now = now or utcnow()
    ops = _ops_by_kind(ops)
    memo = memo or Memo()
    result = PassResult()
    with database.session() as session:
        entries = [e for e in queue_rows.head(session, conf.queue.scan_depth) if e.kind in ops]
        unclaimed = [e for kind in ops for e in queue_rows.admitted(session, kind)]
        seen = {x.seq for x in entries}
        expired_beyond = [e for e in queue_rows.expired(session, now, 100)
                          if e.seq not in seen and e.kind in ops]
        requests = _load(session, entries + unclaimed + expired_beyond)
        _remove(session, [e for e in entries if _status(requests, e) != states.QUEUED])
        for entry in expired_beyond:
            _expire(session, entry.kind, entry.ref_id, entry.why or "not examined yet: too "
                    "many requests ahead", result)
        candidates = [
            _Candidate(e.seq, e.ref_id, e.tenant_id, e.priority, e.created_at, e.deadline,
                       e.bypassed, KINDS[e.kind].spec(requests[(e.kind, e.ref_id)]), e.kind)
            for e in entries if _status(requests, e) == states.QUEUED]
        if not candidates:
            _remove(session, [e for e in unclaimed if _status(requests, e) not in UNCLAIMED])
            return result
    whys: dict[int, str] = {}
    with database.read_session() as session:
        failures = plan.recent_failures(session)
        if any(KINDS[c.kind].storage(c.spec) for c in candidates):
            snapshot = snapshot_from_db(session, allocations.usages_by_provider(session),
                                        failures, storage=True)
        else:
            snapshot = memo.snapshots.snapshot(session, failures)
        done = _place_unclaimed(session, conf, snapshot, unclaimed, memo)
        vcpus = (_tenant_vcpus(session, {c.tenant_id for c in candidates})
                 if conf.queue.fair_share else None)
        _admit_in_order(session, database, conf, ops, order(candidates, vcpus), snapshot, now,
                        result, whys)
    with database.session() as session:
        _remove(session, done)
        for candidate, why in result.expiring:
            _expire(session, candidate.kind, candidate.ref_id, why, result)
        queue_rows.note_attempts(session, whys)
    return result


def _place_unclaimed(session, conf, snapshot, entries, memo: Memo) -> list:
    """Put what admitted requests will claim on ``snapshot``; returns entries done with."""
    done = []
    rows = _load(session, entries)
    for entry in entries:
        row = rows.get((entry.kind, entry.ref_id))
        taken = None if row is None else KINDS[entry.kind].unclaimed(
            session, conf, row, snapshot, memo.unclaimed)
        if taken is None:
            done.append(entry)
            continue
        for host, resources in taken:
            if host in snapshot.by_name:
                snapshot.add_usage(host, resources)
    waiting = {(e.kind, e.ref_id) for e in entries} - {(e.kind, e.ref_id) for e in done}
    memo.unclaimed = {k: v for k, v in memo.unclaimed.items() if k[:2] in waiting}
    return done


def _admit_in_order(session, database, conf, ops, candidates, snapshot, now, result,
                    whys: dict[int, str]) -> None:
    blocked: list[int] = []  # seqs of the requests ahead that did not fit
    held: set[str] = set()
    # Queues hold many equal requests: one that did not fit answers for its
    # equals until the snapshot or the held hosts change.
    refused: dict[tuple, str] = {}
    for candidate in candidates:
        result.examined += 1
        kind = KINDS[candidate.kind]
        key = refusal_key(kind, candidate.spec, bool(held))
        why = refused.get(key)
        taken = None
        if why is None:
            taken, why = kind.place(session, conf, candidate.spec, snapshot, held)
        if taken is None:
            refused[key] = why
            if candidate.deadline is not None and candidate.deadline <= now:
                result.expiring.append((candidate, why))
                continue
            whys[candidate.seq] = why
            blocked.append(candidate.seq)
            if result.head is None:
                result.head = candidate.ref_id
                if _reserved(conf, candidate, now):
                    held = kind.usable_hosts(session, candidate.spec, snapshot)
                    result.held = len(held)
            continue
        try:
            # Its own transaction: its flow is posted as soon as it commits.
            with database.session() as write:
                admitted = ops[candidate.kind].admit(write, candidate.ref_id,
                                                     **kind.admit_args(taken))
                if admitted:
                    queue_rows.mark_admitted(write, candidate.seq)
                    queue_rows.note_bypassed(write, blocked)
                crash_points.maybe_crash(ADMISSION_ATOM, crash_points.DURING_ADMISSION)
        except rows.QuotaExceeded as exc:
            whys[candidate.seq] = exc.message
            continue
        if not admitted:
            continue
        for host, resources in taken:
            snapshot.add_usage(host, resources)
        refused.clear()
        result.admitted.append(candidate.ref_id)


def _expire(session, kind: str, ref_id: str, why: str, result: PassResult) -> None:
    fault = rows.fault(QUEUE_TIMEOUT, f"queue_timeout ran out before it fitted: {why}",
                       step="queue")
    if queue_rows.move_status(session, kind, ref_id, states.QUEUED, states.EXPIRED,
                              fault=fault):
        result.expired.append(ref_id)
    queue_rows.remove(session, kind, [ref_id])
