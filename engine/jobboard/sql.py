"""A TaskFlow jobboard in the fleetflow SQL database: the embedded board, no server.

TaskFlow 6.5 ships boards for Redis, ZooKeeper and etcd only. This one keeps
its postings in the ``jobs`` table (persistence/jobs.py) and implements
TaskFlow's ``JobBoard`` / ``Job`` interfaces, so TaskFlow's own conductors
run on it unchanged.

Claims are leases: ``claim`` sets ``owner`` and ``claim_expires_at``; the
owner's keep-alive extends the lease (:meth:`SqlJobBoard.extend_claim`); a
conductor that dies stops extending and its job becomes claimable by anyone
once the lease runs out — including by the same process restarted. Every
change is one conditional UPDATE, so two boards (threads or processes) racing
for a job cannot both win.

Lease times come from each process's clock (UTC): conductors on different
machines need synchronised clocks, as with any lease. A clock that is off
only shortens or lengthens a lease; the fencing token (persistence/fences.py)
is what keeps a stale owner's writes out.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import sqlalchemy as sa
from oslo_utils import uuidutils
from taskflow import exceptions as tf_exc
from taskflow import logging as tf_logging
from taskflow import states as tf_states
from taskflow.jobs import base

from fleetflow.common import metrics
from fleetflow.persistence import jobs as jobs_db
from fleetflow.persistence.jobs import Job as JobRow

LOG = tf_logging.getLogger(__name__)
JOBS = JobRow.__table__

DEFAULT_CLAIM_EXPIRY = 30.0


class SqlJob(base.Job):
    """One posting of the SQL board. State is read from the row on each access."""

    def __init__(self, board: SqlJobBoard, row: sa.Row, backend=None, book=None,
                 listed: str | None = None):
        super().__init__(board, row.name, uuid=row.uuid, details=dict(row.details or {}),
                         backend=backend, book=book,
                         book_data={"uuid": row.book_uuid, "name": row.book_name}
                         if row.book_uuid else None)
        self._sequence = row.sequence
        self._priority = base.JobPriority.convert(row.priority)
        self._created_on = row.created_at
        # Its state when the board was listed (the listing's iterator filters on it).
        self.listed_state = listed

    @property
    def sequence(self) -> int:
        return self._sequence

    @property
    def priority(self) -> base.JobPriority:
        return self._priority

    @property
    def created_on(self) -> dt.datetime:
        return self._created_on

    @property
    def last_modified(self) -> dt.datetime | None:
        row = self.board._row(self.uuid)
        return row.updated_at if row is not None else None

    @property
    def state(self) -> str:
        return self.board._job_state(self.uuid)

    def extend_expiry(self, expiry: float) -> bool:
        """Extend the claim by ``expiry`` seconds from now, whoever holds it.

        Same contract as ``RedisJob.extend_expiry``; conductors use the
        owner-checked :meth:`SqlJobBoard.extend_claim` instead.
        """
        return self.board._extend(self.uuid, None, expiry)

    def expires_in(self) -> float | None:
        """Seconds left on the claim (negative once expired); None when unclaimed."""
        row = self.board._row(self.uuid)
        if row is None or row.owner is None or row.claim_expires_at is None:
            return None
        return (row.claim_expires_at - jobs_db.utcnow()).total_seconds()

    def __eq__(self, other):
        if not isinstance(other, SqlJob):
            return NotImplemented
        return self.uuid == other.uuid

    def __hash__(self):
        return hash(self.uuid)


class SqlJobBoard(base.JobBoard):
    """TaskFlow jobboard on the ``jobs`` table of a fleetflow ``Database``.

    ``conf`` keys: ``claim_expiry`` (seconds, default 30) and ``poll_interval``
    (seconds between looks at the table while :meth:`wait` ing, default 0.25).
    """

    def __init__(self, name: str, conf: dict, database, persistence=None):
        super().__init__(name, dict(conf or {}))
        self._database = database
        self._persistence = persistence
        self._claim_expiry = float(self._conf.get("claim_expiry", DEFAULT_CLAIM_EXPIRY))
        self._poll_interval = float(self._conf.get("poll_interval", 0.25))
        self._connected = False
        self._entities: dict[str, dict] = {}
        self._lock = threading.Lock()

    # -- connection ---------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._connected

    def connect(self) -> None:
        with self._database.engine.connect() as conn:
            if not sa.inspect(conn).has_table(JobRow.__tablename__):
                raise tf_exc.JobFailure("the jobs table is missing: run 'fleetflow db upgrade'")
        self._connected = True

    def close(self) -> None:
        # The Database belongs to the process, not to the board.
        self._connected = False

    @property
    def claim_expiry(self) -> float:
        return self._claim_expiry

    # -- reading ------------------------------------------------------------

    def _row(self, job_uuid: str) -> sa.Row | None:
        # Polled: each job's state at every look at the board, and by keep-alives.
        # A Core read takes no write lock and builds no ORM object.
        with self._database.reading() as conn:
            return conn.execute(sa.select(JOBS).where(JOBS.c.uuid == job_uuid)).first()

    def _job_state(self, job_uuid: str) -> str:
        return _state_of(self._row(job_uuid), jobs_db.utcnow())

    def _fetch_jobs(self, ensure_fresh: bool = False) -> list[SqlJob]:
        with self._database.reading() as conn:
            rows = conn.execute(
                sa.select(JOBS)
                .where(JOBS.c.board == self.name, JOBS.c.state == jobs_db.JOB_POSTED)
                .order_by(JOBS.c.sequence, JOBS.c.created_at)).all()
        now = jobs_db.utcnow()
        jobs = [SqlJob(self, row, backend=self._persistence, listed=_state_of(row, now))
                for row in rows]
        # Higher priorities first, posting order inside one priority.
        order = [p.value for p in (base.JobPriority.VERY_HIGH, base.JobPriority.HIGH,
                                   base.JobPriority.NORMAL, base.JobPriority.LOW,
                                   base.JobPriority.VERY_LOW)]
        jobs.sort(key=lambda j: (order.index(j.priority.value), j.sequence))
        return jobs

    def depth(self) -> dict:
        """``{"claimed", "unclaimed", "oldest_unclaimed"}``: the jobs on the board and the
        age in seconds of the one waiting longest for a conductor (0: none waits), in one
        query (a metrics scrape reads it)."""
        now = jobs_db.utcnow()
        with self._database.reading() as conn:
            rows = conn.execute(
                sa.select(JOBS.c.owner, JOBS.c.claim_expires_at, JOBS.c.created_at)
                .where(JOBS.c.board == self.name, JOBS.c.state == jobs_db.JOB_POSTED)).all()
        claimed = [row for row in rows if _claim_is_live(row, now)]
        waiting = [row.created_at for row in rows if not _claim_is_live(row, now)]
        oldest = (now - min(waiting)).total_seconds() if waiting else 0.0
        return {"claimed": len(claimed), "unclaimed": len(waiting),
                "oldest_unclaimed": max(oldest, 0.0)}

    def iterjobs(self, only_unclaimed: bool = False, ensure_fresh: bool = False):
        return _ListedJobs(self, LOG, only_unclaimed=only_unclaimed,
                           ensure_fresh=ensure_fresh, board_fetch_func=self._fetch_jobs)

    def wait(self, timeout: float | None = None):
        """Block until at least one job is posted; NotFound after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            jobs = self._fetch_jobs()
            if jobs:
                return base.JobBoardIterator(
                    self, LOG, board_fetch_func=lambda ensure_fresh, found=jobs: found)
            if deadline is not None and time.monotonic() >= deadline:
                raise tf_exc.NotFound(f"no jobs were posted within {timeout} seconds")
            pause = self._poll_interval
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)

    @property
    def job_count(self) -> int:
        with self._database.reading() as conn:
            return conn.scalar(
                sa.select(sa.func.count()).select_from(JOBS)
                .where(JOBS.c.board == self.name, JOBS.c.state == jobs_db.JOB_POSTED))

    def job_exists(self, job) -> bool:
        """True while ``job`` is on the board (posted, not consumed or trashed).

        What tells a keep-alive "the job is gone" from "someone else holds it".
        """
        row = self._row(job.uuid)
        return row is not None and row.state == jobs_db.JOB_POSTED

    def find_owner(self, job) -> str | None:
        row = self._row(job.uuid)
        if row is None:
            raise tf_exc.NotFound(f"job {job.uuid} not found")
        if row.state == jobs_db.JOB_POSTED and _claim_is_live(row, jobs_db.utcnow()):
            return row.owner
        return None

    # -- writing ------------------------------------------------------------

    def post(self, name: str, book=None, details=None,
             priority=base.JobPriority.NORMAL) -> SqlJob:
        priority = base.JobPriority.convert(priority)
        now = jobs_db.utcnow()
        with self._database.session() as session:
            # max + 1 inside the (write-locked on SQLite) transaction; on
            # PostgreSQL two posts may share a number, which only affects order.
            last = session.scalar(sa.select(sa.func.max(JobRow.sequence))
                                  .where(JobRow.board == self.name)) or 0
            row = JobRow(uuid=uuidutils.generate_uuid(), board=self.name, name=name,
                         sequence=last + 1, priority=priority.value,
                         details=dict(details or {}),
                         book_uuid=book.uuid if book is not None else None,
                         book_name=book.name if book is not None else None,
                         state=jobs_db.JOB_POSTED, created_at=now, updated_at=now)
            session.add(row)
        return SqlJob(self, row, backend=self._persistence, book=book)

    @base.check_who
    def claim(self, job, who: str, expiry: float | None = None) -> None:
        """Claim ``job`` for ``who`` for ``expiry`` seconds (the board's default)."""
        expiry = self._claim_expiry if expiry is None else float(expiry)
        if expiry <= 0:
            raise ValueError(f"claim expiry must be positive, not {expiry}")
        now = jobs_db.utcnow()
        claimable = sa.or_(JobRow.owner.is_(None), JobRow.claim_expires_at <= now)
        with self._database.session() as session:
            won = session.execute(
                sa.update(JobRow)
                .where(JobRow.uuid == job.uuid, JobRow.state == jobs_db.JOB_POSTED, claimable)
                .values(owner=who, claim_expires_at=now + dt.timedelta(seconds=expiry),
                        updated_at=now)).rowcount
            if won == 1:
                return
            row = session.get(JobRow, job.uuid)
        if row is None or row.state != jobs_db.JOB_POSTED:
            raise tf_exc.NotFound(f"job {job.uuid} not found to be claimed")
        metrics.CLAIM_CONFLICTS.labels(self.name).inc()
        raise tf_exc.UnclaimableJob(f"job {job.uuid} already claimed by {row.owner}")

    def extend_claim(self, job, who: str, expiry: float | None = None) -> bool:
        """Extend ``who``'s claim on ``job``; False when ``who`` no longer holds it.

        A lapsed lease that nobody else took is renewed: the job is still ours.
        """
        expiry = self._claim_expiry if expiry is None else float(expiry)
        return self._extend(job.uuid, who, expiry)

    def _extend(self, job_uuid: str, who: str | None, expiry: float) -> bool:
        now = jobs_db.utcnow()
        where = [JobRow.uuid == job_uuid, JobRow.state == jobs_db.JOB_POSTED,
                 JobRow.owner.is_not(None)]
        if who is not None:
            where.append(JobRow.owner == who)
        with self._database.session() as session:
            done = session.execute(
                sa.update(JobRow).where(*where)
                .values(claim_expires_at=now + dt.timedelta(seconds=expiry),
                        updated_at=now)).rowcount
        return done == 1

    def _release(self, job, who: str, verb: str, values: dict) -> None:
        """Apply ``values`` to ``job`` if ``who`` holds it; else TaskFlow's errors."""
        now = jobs_db.utcnow()
        with self._database.session() as session:
            done = session.execute(
                sa.update(JobRow)
                .where(JobRow.uuid == job.uuid, JobRow.state == jobs_db.JOB_POSTED,
                       JobRow.owner == who)
                .values(updated_at=now, **values)).rowcount
            if done == 1:
                return
            row = session.get(JobRow, job.uuid)
        if row is None or row.state != jobs_db.JOB_POSTED:
            raise tf_exc.NotFound(f"job {job.uuid} not found to be {verb}")
        if row.owner is None:
            raise tf_exc.NotFound(f"can not {verb} job {job.uuid}: it has no owner")
        raise tf_exc.JobFailure(f"can not {verb} job {job.uuid}, which is not owned by "
                                f"{who} (it is owned by {row.owner})")

    @base.check_who
    def consume(self, job, who: str) -> None:
        # NOTE: a lapsed lease nobody else took still lets its owner finish:
        # the work is done and the flow detail says so.
        self._release(job, who, "consumed",
                      {"state": jobs_db.JOB_COMPLETE, "claim_expires_at": None})

    @base.check_who
    def abandon(self, job, who: str) -> None:
        self._release(job, who, "abandoned", {"owner": None, "claim_expires_at": None})

    @base.check_who
    def trash(self, job, who: str) -> None:
        # The row stays (state TRASHED) for an operator to review, as TaskFlow's
        # boards move trashed jobs aside rather than deleting them.
        self._release(job, who, "trashed",
                      {"state": jobs_db.JOB_TRASHED, "claim_expires_at": None})

    def register_entity(self, entity) -> None:
        """Remember a conductor entity (kept in memory: the board has no registry table)."""
        with self._lock:
            self._entities[entity.name] = {"kind": entity.kind, "metadata": entity.metadata}

    @property
    def entities(self) -> dict[str, dict]:
        with self._lock:
            return dict(self._entities)


def _state_of(row: sa.Row | None, now: dt.datetime) -> str:
    if row is None or row.state != jobs_db.JOB_POSTED:
        # Consumed and trashed jobs have left the board, as in TaskFlow's
        # Redis board where both remove the listing.
        return tf_states.COMPLETE
    if _claim_is_live(row, now):
        return tf_states.CLAIMED
    return tf_states.UNCLAIMED


class _ListedJobs(base.JobBoardIterator):
    """TaskFlow's iterator over the board, each job's state as the listing read it.

    Stock asks every listed job for its state, one read of its row each: a
    conductor's look at a board of 20 jobs was 21 queries. The listing read the
    same columns a moment before, in one query. A job claimed in between is
    still offered; the claim that follows is one conditional UPDATE and fails
    (as a claim lost to a race always could).
    """

    def _next_job(self):
        allowed = self._UNCLAIMED_JOB_STATES if self.only_unclaimed else self._JOB_STATES
        while self._jobs:
            job = self._jobs.popleft()
            if job.listed_state in allowed:
                return job
        return None


def _claim_is_live(row: sa.Row, now: dt.datetime) -> bool:
    if row.owner is None:
        return False
    return row.claim_expires_at is None or row.claim_expires_at > now
