"""The audit's flow checks: work that should be moving and is not.

Placement, rows and hosts can all agree while nothing will ever finish an
operation: after a Redis restart a reservation read BUILDING with 300 of 300
instances ACTIVE, its flow SUSPENDED with no job on the board, and the rest
of the audit found nothing wrong. What must still run is written in the
database (flow details, and the intents committed with an operation's rows);
who runs it is on the jobboard. This module compares the two:

- ``stranded_flow``: an unfinished flow, not paused for an operator, that has
  made no progress (no write of its flow detail or any atom) for the grace
  period and that no live claim covers: no job on the board, or a job
  unclaimed (or whose claim expired) for the grace period too. An intent
  committed longer ago than the grace that never got a flow detail is one
  as well: its operation was accepted and nothing will run it.
- ``status_mismatch`` (:mod:`.status`): a row whose status disagrees
  with its members or its flow;
- ``stranded_operation`` (:mod:`.status`): a row still in progress
  whose flow ended FAILURE half way, which only an operator's revert or
  resume finishes.

The grace is what a healthy engine needs to mend a lost job by itself: a
conductor's keep-alive posts it again within a keep-alive round, the
reconciler within its own grace (at least a claim expiry) and a pass. A
strict audit (every flow is expected to have settled) uses none.

Cost: one listing of the board, one query of the unfinished flows on the
flow details' state index (their atoms' last write read in the same query,
on the atoms' parent index) and one of the intents never materialized (on
its index). Without a board the job part is skipped (``counts["jobboard"]``
is 0): whether a flow is owned cannot be told from the database alone.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections import defaultdict

import sqlalchemy as sa
from oslo_serialization import jsonutils
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states

from fleetflow.flows import keys
from fleetflow.persistence import jobs as jobs_db
from fleetflow.persistence.intents import FlowIntent
from fleetflow.persistence.logbook.models import ATOMDETAILS, FLOWDETAILS
from fleetflow.plugin import flow_meta
from fleetflow.plugin.flow_meta import SETTLED_FLOW_STATES

LOG = logging.getLogger(__name__)

KINDS = {
    "stranded_flow": "a flow that must still make progress has made none for the grace "
                     "period and nothing will run it: no job on the board, its job "
                     "unclaimed or its claim expired, or its submission never started",
}

#: Seconds without progress (and without a live claim) before a flow is stranded.
DEFAULT_GRACE = 60.0
#: Flow states with work left, as the reconciler reads them (None: never loaded).
UNFINISHED = (tf_states.PENDING, tf_states.RUNNING, tf_states.SUSPENDING,
              tf_states.SUSPENDED, tf_states.RESUMING, tf_states.REVERTING)
# What a flow works on, as its store (or its factory's arguments) names it.
RESOURCE_KEYS = (keys.RESERVATION_ID, keys.EVACUATION_ID, keys.VCLUSTER_ID)
CHUNK = 500


def default_grace(conf) -> float:
    """The grace for a cloud run with ``conf``.

    Long enough for the reconciler to have replaced a lost job (its grace
    is at least a claim expiry, then a pass) and for a keep-alive to have
    done it sooner: three reconcile intervals, two claim expiries, and never
    under a minute.
    """
    return max(DEFAULT_GRACE, 3.0 * float(conf.conductor.reconcile_interval),
               2.0 * float(conf.jobboard.claim_expiry))


def grace(strict: bool, given: float | None = None, conf=None) -> float:
    """The grace to use: ``given`` if any; none when strict (flows should have
    settled); else the configuration's, or :data:`DEFAULT_GRACE`."""
    if given is not None:
        return max(0.0, float(given))
    if strict:
        return 0.0
    return default_grace(conf) if conf is not None else DEFAULT_GRACE


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def naive(value: dt.datetime | None) -> dt.datetime | None:
    """``value`` as naive UTC, how every fleetflow column stores time."""
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(dt.UTC).replace(tzinfo=None)


def iso(value: dt.datetime | None) -> str:
    return "never" if value is None else value.replace(tzinfo=dt.UTC).isoformat(
        timespec="seconds")


def age(now: dt.datetime, since: dt.datetime | None) -> float:
    """Seconds from ``since`` to ``now``; unknown is infinitely old."""
    return float("inf") if since is None else (now - since).total_seconds()


def ago(now: dt.datetime, since: dt.datetime | None) -> str:
    seconds = age(now, since)
    return iso(since) + ("" if since is None else f" ({seconds:.0f} s ago)")


@dataclasses.dataclass(frozen=True)
class Flow:
    """One flow detail as the checks need it."""

    uuid: str
    name: str
    state: str
    paused: bool
    board: str | None  # the board it was submitted to (None: not recorded)
    resource: str | None  # "reservation <id>", "vcluster <id>", ...
    last_progress: dt.datetime | None  # the latest write of it or of any atom

    @property
    def settled(self) -> bool:
        return self.state in SETTLED_FLOW_STATES

    def in_flight(self, now: dt.datetime, grace_s: float) -> bool:
        """Unfinished and written to within the grace: someone is working on it."""
        return not self.settled and age(now, self.last_progress) < grace_s


def resource_of(*sources: dict | None) -> str | None:
    """``"reservation <id>"`` (or evacuation, vcluster) from a store or kwargs."""
    for source in sources:
        for key in RESOURCE_KEYS:
            if (source or {}).get(key):
                return f"{key.removesuffix('_id')} {source[key]}"
    return None


def _flow(uuid, name, state, meta, updated_at, atoms_at) -> Flow:
    meta = jsonutils.loads(meta) if isinstance(meta, str) else (meta or {})
    options = flow_meta.options(meta)
    kwargs = (meta.get("factory") or {}).get("kwargs")
    stamps = [t for t in (updated_at, atoms_at) if t is not None]
    return Flow(uuid, options.get("flow_name") or name or "?", state or tf_states.PENDING,
                bool(options.get("paused")), options.get("board"),
                resource_of(meta.get("store"), kwargs), max(stamps) if stamps else None)


def _select_flows():
    fd, ad = FLOWDETAILS.c, ATOMDETAILS.c
    atoms_at = (sa.select(sa.func.max(ad.updated_at)).where(ad.parent_uuid == fd.uuid)
                .scalar_subquery())
    return sa.select(fd.uuid, fd.name, fd.state, fd.meta, fd.updated_at, atoms_at)


def unfinished_flows(session) -> list[Flow]:
    """Every flow not over yet: ONE query on the flow details' state index."""
    fd = FLOWDETAILS.c
    return [_flow(*row) for row in session.execute(_select_flows().where(
        sa.or_(fd.state.in_(UNFINISHED), fd.state.is_(None))))]


def flows_by_uuid(session, uuids) -> dict[str, Flow]:
    """The flow details of ``uuids`` (by primary key); unknown ones are left out."""
    uuids = sorted({u for u in uuids if u})
    found = {}
    for start in range(0, len(uuids), CHUNK):
        for row in session.execute(_select_flows().where(
                FLOWDETAILS.c.uuid.in_(uuids[start:start + CHUNK]))):
            flow = _flow(*row)
            found[flow.uuid] = flow
    return found


# -- the board ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobView:
    """Who holds one job: a live ``owner``, or nobody since ``since``
    (``lapsed``: the owner whose claim expired then). ``last_change``: the
    board only knows when the job last changed (a claim, or its post), not
    when its claim ran out."""

    owner: str | None
    since: dt.datetime | None
    lapsed: str | None = None
    last_change: bool = False


def list_jobs(board, database) -> dict[str, list]:
    """Every job on ``board`` by flow id (the job name): ONE listing.

    The SQL board's rows carry their claims, read in the same query; other
    boards' jobs (Redis) are looked up one by one, and only for the flows
    that are stale (:func:`view`).
    """
    from fleetflow.engine.jobboard.sql import SqlJobBoard

    found: dict[str, list] = defaultdict(list)
    if isinstance(board, SqlJobBoard):
        # The SQL board keeps its postings in the database the audit reads.
        table = jobs_db.Job
        now = utcnow()
        with database.read_session() as session:
            rows = session.execute(sa.select(
                table.name, table.owner, table.claim_expires_at, table.updated_at)
                .where(table.board == board.name, table.state == jobs_db.JOB_POSTED))
            for name, owner, expires_at, updated_at in rows:
                if owner is not None and (expires_at is None or expires_at > now):
                    found[name].append(JobView(owner, None))
                elif owner is not None:
                    found[name].append(JobView(None, expires_at, lapsed=owner))
                else:
                    found[name].append(JobView(None, updated_at))
        return found
    for job in board.iterjobs(ensure_fresh=True):
        found[job.name].append(job)
    return found


def view(board, job) -> JobView | None:
    """``job``'s holder; None when it left the board meanwhile.

    On Redis a claim that expired leaves no trace but its last change (the
    claim, its last extension, or the post). A job that cannot be looked at
    counts as held: the audit reports what it knows is stuck, not what it
    could not see.
    """
    if isinstance(job, JobView):
        return job
    try:
        owner = board.find_owner(job)
        since = job.last_modified or job.created_on
    except tf_exc.NotFound:
        return None
    except Exception as exc:  # noqa: BLE001 - the board went away meanwhile
        LOG.warning("audit: looking at job %s failed: %s", job.uuid, exc)
        return JobView(f"unknown ({type(exc).__name__})", None)
    return JobView(owner, naive(since), last_change=True)


def why_stranded(board, jobs: list, now: dt.datetime, grace_s: float) -> str | None:
    """Why nothing runs a stale flow with these jobs; None when something may."""
    if not jobs:
        return "no job on the board"
    reasons = []
    for job in jobs:
        held = view(board, job)
        if held is None:
            continue
        if held.owner is not None or age(now, held.since) < grace_s:
            return None  # claimed, or just posted or released: a conductor takes it
        if held.lapsed:
            reasons.append(f"its job's claim by {held.lapsed} expired at {iso(held.since)}")
        elif held.last_change:
            reasons.append(f"its job unclaimed (last claimed or posted at {iso(held.since)})")
        else:
            reasons.append(f"its job unclaimed since {iso(held.since)}")
    return "; ".join(reasons) or "no job on the board"


# -- the check ---------------------------------------------------------------------


def check_stranded(add, database, board, grace_s: float,
                   now: dt.datetime | None = None) -> dict[str, int]:
    """Report ``stranded_flow`` through ``add(kind, subject, detail)``; returns counts.

    The board is listed before the flows are read, as the reconciler does: a
    job posted after the listing belongs to a flow saved before it, whose
    progress is then recent.
    """
    counts = {"jobboard": 0, "jobboard_unreachable": 0}
    jobs = None
    if board is not None:
        try:
            jobs = list_jobs(board, database)
        except Exception as exc:  # noqa: BLE001 - no board: the job part is unknown
            LOG.warning("audit: listing the jobboard failed: %s", exc)
            counts["jobboard_unreachable"] = 1
    now = now or utcnow()
    with database.read_session() as session:
        flows = unfinished_flows(session) if jobs is not None else []
        cutoff = now - dt.timedelta(seconds=grace_s)
        intents = session.execute(sa.select(
            FlowIntent.flow_id, FlowIntent.flow_name, FlowIntent.store,
            FlowIntent.flow_kwargs, FlowIntent.created_at)
            .where(FlowIntent.materialized_at.is_(None), FlowIntent.created_at <= cutoff)
            ).all()
        started = set(flows_by_uuid(session, [i.flow_id for i in intents]))
    if jobs is not None:
        counts.update(jobboard=1, jobs=sum(len(j) for j in jobs.values()),
                      unfinished_flows=len(flows))
        _flows(add, board, flows, jobs, now, grace_s)
    unstarted = [i for i in intents if i.flow_id not in started]
    counts["unstarted_intents"] = len(unstarted)
    for intent in sorted(unstarted, key=lambda i: i.created_at):
        on = resource_of(intent.store, intent.flow_kwargs)
        add("stranded_flow", intent.flow_id,
            f"{intent.flow_name}{' on ' + on if on else ''}: submitted, never started "
            f"(committed {ago(now, intent.created_at)}; it has no flow detail)")
    return counts


def _flows(add, board, flows: list[Flow], jobs: dict, now, grace_s: float) -> None:
    for flow in sorted(flows, key=lambda f: f.uuid):
        if flow.paused or flow.settled or flow.board not in (None, board.name):
            continue  # an operator's to decide, over, or another board's
        if flow.in_flight(now, grace_s):
            continue
        why = why_stranded(board, jobs.get(flow.uuid, []), now, grace_s)
        if why is not None:
            on = f" on {flow.resource}" if flow.resource else ""
            add("stranded_flow", flow.uuid,
                f"{flow.name} flow {flow.state}{on}: no progress since "
                f"{ago(now, flow.last_progress)}; {why}")
