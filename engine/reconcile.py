"""The jobboard re-derived from the database: what must run has a job, what ended has none.

The database is the record of which flows must run: the intents committed
with their operation's rows (persistence/intents.py) and the flow details.
The board is a cache of it, which a Redis restarted without persistence, or
a post that failed, can empty. Every ``[conductor] reconcile_interval``
seconds one process per board (a lease row) makes one pass:

a. intents committed a while ago but never materialized (the submitter died
   or failed after the commit) get their logbook, flow detail and job;
b. every unfinished flow (not SUCCESS, REVERTED or FAILURE) submitted to this
   board that is not paused for an operator and has no job on it gets one
   again — once it has been seen without one for :func:`grace` seconds, long
   enough for a running conductor's keep-alive to have replaced a lost job
   itself, and for the old owner's lease to be over;
c. an unclaimed job whose flow is over is consumed.

Re-posting is safe: a conductor that still runs the flow is fenced out by the
new owner's token (engine/fencing.py), and a conductor skips a job whose flow
an older job's live claim already runs (engine/conductor/worker.py).

Cost: one listing of the board and one query of the flow details by their
indexed state (plus an indexed probe of the unmaterialized intents), so a
pass costs as much with 10,000 finished flows as with none
(bench/reconcile.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time

import sqlalchemy as sa
from oslo_serialization import jsonutils
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow.persistence import models as tf_models

from fleetflow.common import metrics
from fleetflow.common.periodic import Periodic
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.worker import default_name
from fleetflow.persistence import intents
from fleetflow.persistence.db import READ_ONLY
from fleetflow.plugin import flow_meta
from fleetflow.plugin.flow_meta import SETTLED_FLOW_STATES

LOG = logging.getLogger(__name__)

#: Flow states that still have work to do (None: saved, never loaded by an engine).
UNFINISHED_STATES = (tf_states.PENDING, tf_states.RUNNING, tf_states.SUSPENDING,
                     tf_states.SUSPENDED, tf_states.RESUMING, tf_states.REVERTING)
#: Seconds after its commit an intent is left to the submitter that wrote it.
INTENT_GRACE = 5.0


def grace(conf) -> float:
    """Seconds an unfinished flow must be without a job before the reconciler posts one.

    Two keep-alive rounds (a live owner replaces a lost job itself) and a
    whole claim expiry: an owner skips fence look-ups for half an expiry
    after an extension, so nobody may claim a new job of its flow before then.
    """
    return max(float(conf.conductor.reconcile_interval),
               2.0 * float(conf.jobboard.keepalive_interval),
               float(conf.jobboard.claim_expiry))


@dataclasses.dataclass
class Memory:
    """What a reconciler keeps between passes: since when each flow has had no job."""

    missing: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Flow:
    uuid: str
    state: str | None
    paused: bool
    book_name: str | None
    # The board it was submitted to; None for flows saved before boards were
    # recorded (looked after by any board's reconciler).
    board: str | None


def _flow(uuid, state, meta, book_name) -> _Flow:
    meta = jsonutils.loads(meta) if isinstance(meta, str) else (meta or {})
    options = flow_meta.options(meta)
    return _Flow(uuid, state, bool(options.get("paused")), book_name, options.get("board"))


def _is_logbook_backend(backend) -> bool:
    from fleetflow.persistence.logbook.backend import LogbookBackend

    return isinstance(backend, LogbookBackend)


def _select_flows(backend, where) -> list[_Flow]:
    from fleetflow.persistence.logbook.models import FLOWDETAILS, LOGBOOKS

    fd, lb = FLOWDETAILS.c, LOGBOOKS.c
    stmt = (sa.select(fd.uuid, fd.state, fd.meta, lb.name)
            .select_from(FLOWDETAILS.outerjoin(LOGBOOKS, lb.uuid == fd.parent_uuid))
            .where(where(fd)))
    # A read: on SQLite a WAL snapshot that takes no write lock.
    with backend.engine.execution_options(**{READ_ONLY: True}).connect() as conn:
        return [_flow(*row) for row in conn.execute(stmt)]


def _all_flows(backend) -> list[_Flow]:
    """Every flow of a backend without SQL (TaskFlow's in-memory one, in tests)."""
    with contextlib.closing(backend.get_connection()) as conn:
        return [_flow(fd.uuid, fd.state, fd.meta, book.name)
                for book in conn.get_logbooks(lazy=True)
                for fd in conn.get_flows_for_book(book.uuid, lazy=True)]


def unfinished_flows(backend) -> list[_Flow]:
    """The flows not over yet: ONE query on the flow details' state index."""
    if not _is_logbook_backend(backend):
        return [f for f in _all_flows(backend)
                if f.state is None or f.state in UNFINISHED_STATES]
    return _select_flows(backend, lambda fd: sa.or_(fd.state.in_(UNFINISHED_STATES),
                                                    fd.state.is_(None)))


def _flows_by_uuid(backend, uuids: list[str]) -> dict[str, _Flow]:
    if not uuids:
        return {}
    if not _is_logbook_backend(backend):
        wanted = set(uuids)
        return {f.uuid: f for f in _all_flows(backend) if f.uuid in wanted}
    return {f.uuid: f for f in _select_flows(backend, lambda fd: fd.uuid.in_(uuids))}


def _materialize_intents(board, backend, database, counts: dict) -> None:
    with database.read_session() as session:
        pending = intents.pending(session, board.name, INTENT_GRACE)
    for intent in pending:
        try:
            submit_mod.materialize(board, backend, database.engine, intent)
        except Exception:
            LOG.warning("flow %s (%s): materializing its intent failed; next pass",
                        intent.flow_id, intent.flow_name, exc_info=True)
            continue
        LOG.warning("flow %s (%s) was committed but never posted: posted now",
                    intent.flow_id, intent.flow_name)
        counts["materialized"] += 1


def _post(board, backend, flow: _Flow) -> None:
    if flow.book_name is None:  # no SQL row of its logbook to name it
        submit_mod.ensure_posted(board, backend, flow.uuid)
        return
    submit_mod.post_job(board, tf_models.LogBook(flow.book_name, uuid=flow.uuid), flow.uuid)


def _repost_missing(board, backend, flows: list[_Flow], names: set[str], memory, wait: float,
                    now: float, counts: dict) -> None:
    due = []
    missing_now = set()
    for flow in flows:
        if flow.paused or flow.uuid in names or flow.board not in (None, board.name):
            continue
        missing_now.add(flow.uuid)
        if memory is None:
            due.append(flow)
            continue
        since = memory.missing.setdefault(flow.uuid, now)
        if now - since >= wait:
            due.append(flow)
    if memory is not None:
        for uuid in list(memory.missing):
            if uuid not in missing_now:
                del memory.missing[uuid]
    if not due:
        return
    # Look again: a keep-alive may have replaced its job since the listing.
    names = {job.name for job in board.iterjobs(ensure_fresh=True)}
    for flow in due:
        if flow.uuid in names:
            continue
        try:
            _post(board, backend, flow)
        except Exception:
            LOG.warning("flow %s: re-posting its job failed; next pass", flow.uuid,
                        exc_info=True)
            continue
        LOG.warning("flow %s is %s without a job on the board: job posted again",
                    flow.uuid, flow.state or tf_states.PENDING)
        counts["reposted"] += 1
        if memory is not None:
            memory.missing.pop(flow.uuid, None)


def _consume_settled(board, backend, jobs: list, known: set[str], owner: str,
                     counts: dict) -> None:
    leftovers = [job for job in jobs if job.name not in known]
    if not leftovers:
        return
    flows = _flows_by_uuid(backend, sorted({job.name for job in leftovers}))
    for job in leftovers:
        flow = flows.get(job.name)
        if flow is None or flow.paused or flow.state not in SETTLED_FLOW_STATES:
            continue
        try:
            if board.find_owner(job) is not None:
                continue  # its conductor finishes it
            board.claim(job, owner)
            board.consume(job, owner)
        except (tf_exc.UnclaimableJob, tf_exc.NotFound):
            continue  # taken or gone meanwhile
        LOG.info("flow %s is %s: its leftover job %s consumed", job.name, flow.state,
                 job.uuid)
        counts["consumed"] += 1


def reconcile(board, backend, database, conf, memory: Memory | None = None,
              owner: str = "reconciler") -> dict:
    """One pass; returns counts: ``materialized``, ``reposted``, ``consumed`` (and sizes).

    Without ``memory`` a flow without a job is re-posted at once (no grace):
    for a caller that knows no conductor could be replacing it.
    """
    counts = {"materialized": 0, "reposted": 0, "consumed": 0}
    _materialize_intents(board, backend, database, counts)
    # NOTE: the board is listed before the flows are read: a job posted
    # after the listing belongs to a flow saved before it, so every listed
    # job's flow is in what the query sees.
    jobs = list(board.iterjobs(ensure_fresh=True))
    flows = unfinished_flows(backend)
    _repost_missing(board, backend, flows, {job.name for job in jobs}, memory, grace(conf),
                    time.monotonic(), counts)
    _consume_settled(board, backend, jobs, {f.uuid for f in flows}, owner, counts)
    counts.update(jobs=len(jobs), unfinished=len(flows))
    metrics.RECONCILE_PASSES.inc()
    metrics.REPOSTED_JOBS.inc(counts["materialized"] + counts["reposted"])
    return counts


class Reconciler(Periodic):
    """The thread that runs :func:`reconcile` every ``[conductor] reconcile_interval``.

    One per process (``fleetflow serve``, ``fleetflow conductor``); of all
    the processes on one board, the holder of its lease row does the pass.
    """

    def __init__(self, conf, persistence=None, database=None, name: str | None = None):
        from fleetflow.engine.backend import get_backend
        from fleetflow.persistence.db import get_database

        self._conf = conf
        self._persistence = persistence or get_backend(conf)
        self._database = database or get_database(conf)
        super().__init__(f"{name or default_name(conf)}-reconciler",
                         conf.conductor.reconcile_interval)
        self._memory = Memory()
        self._board = None

    def stop(self, timeout: float | None = 30.0) -> None:
        super().stop(timeout)
        if self._board is not None:
            with contextlib.suppress(Exception):
                self._board.close()
            self._board = None

    def run_once(self) -> dict | None:
        """One pass if this process holds the board's lease; None when another does."""
        with self._database.session() as session:
            held = intents.take_lease(session, self._conf.jobboard.board_name, self.name,
                                      3 * max(self.interval, 1.0))
        if not held:
            self._memory.missing.clear()  # another process's pass now
            return None
        if self._board is None:
            from fleetflow.engine.jobboard.boards import make_jobboard

            self._board = make_jobboard(self._conf, self._persistence)
        try:
            return reconcile(self._board, self._persistence, self._database, self._conf,
                             self._memory, owner=self.name)
        except Exception:
            self._give_up_lease()
            raise

    def _give_up_lease(self) -> None:
        # A pass that failed here may work elsewhere: a board client of this
        # process's that stays broken must not keep the lease, renewed every
        # interval, while no pass ever reaches the board. The next pass here
        # builds its board afresh.
        board, self._board = self._board, None
        with contextlib.suppress(Exception):
            board.close()
        with contextlib.suppress(Exception), self._database.session() as session:
            intents.release_lease(session, self._conf.jobboard.board_name, self.name)

    def tick(self, woken: bool) -> None:
        counts = self.run_once()
        if counts and (counts["materialized"] or counts["reposted"] or counts["consumed"]):
            LOG.warning("reconcile: %s", counts)
