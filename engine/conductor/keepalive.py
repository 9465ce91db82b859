"""Keep-alive of a conductor's claims: extend them while their jobs run.

TaskFlow's conductors claim a job and run it, but nothing extends the claim.
A claim with an expiry then lapses in the middle of a long run and a second
conductor runs the job too (measured: it did). This thread extends the claim
of every job its conductor is *running* — registered by the conductor around
its own dispatch of the job, not read from ``conductor._dispatched``, which
stays empty during a blocking conductor's run.

When an extension fails because someone else holds the job now (our lease
lapsed while we were paused or cut off), the keep-alive suspends our engine
so it stops at the next atom boundary, and the fenced checkpoints
(engine/fencing.py) refuse whatever it still tries to write.

When it fails because the job is no longer on the board at all (a Redis
restarted empty), nobody else holds it: losing the board's record is not
losing the flow. The keep-alive takes another job of the same flow (one the
reconciler posted), or posts one, claims it and carries on extending that
one; the engine never stops. The conductor finishes the replacement
(:meth:`ClaimKeepAlive.current`). If another conductor holds a job of the
flow, the claim is lost. From then on the lease below is not trusted: a
re-post may have raced ours, so every checkpoint looks the fence up.

It also answers "can anyone else hold this job right now?" for the fenced
checkpoints (:meth:`ClaimKeepAlive.lease_valid`): not while less than half
the claim expiry has passed since an extension was *sent* — nobody can claim
the job before our claim expires — so checkpoints skip the database look-up
of the fence then. Time is read from CLOCK_BOOTTIME, which keeps counting
while the process is stopped (SIGSTOP) or the machine sleeps; the half-expiry
margin absorbs clock skew between conductors of up to half the expiry.
"""

from __future__ import annotations

import logging
import threading
import time

from taskflow import exceptions as tf_exc
from taskflow.persistence import models as tf_models

LOG = logging.getLogger(__name__)

# Fraction of the claim expiry during which a fresh extension proves the job
# is still ours without asking the database.
LEASE_SAFE_FRACTION = 0.5


def _now() -> float:
    """Seconds on a clock that does not stop while the process is frozen."""
    return time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))


class ClaimLost(Exception):
    """The conductor lost its claim on a job before its engine started: it must not run."""


class _Held:
    __slots__ = ("key", "job", "engine", "lost", "extended_at", "replaced")

    def __init__(self, job):
        # The uuid the conductor knows the job by, whatever job replaces it.
        self.key = job.uuid
        self.job = job
        self.engine = None
        self.lost = False
        # When the last successful extension was sent (None: not yet).
        self.extended_at: float | None = None
        # Another job of the flow stands in for this one: a second job of the
        # flow may exist (a re-post raced ours), so no lease is trusted.
        self.replaced = False


class ClaimKeepAlive:
    """Extends the claims of held jobs every ``interval`` seconds on ``board``."""

    def __init__(self, board, owner: str, interval: float, expiry: float | None = None):
        self._board = board
        self._owner = owner
        self._interval = float(interval)
        self._expiry = expiry
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        # One extension (or replacement) of a job at a time: hold() and the
        # thread must not both post a replacement.
        self._extending = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"keepalive-{self._owner}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def hold(self, job) -> None:
        """Start extending ``job``'s claim (call right after claiming it).

        Extends it once at once, so the lease is known from the start.
        """
        held = _Held(job)
        with self._lock:
            self._held[job.uuid] = held
        self._extend(held)

    def lease_valid(self, job_uuid: str) -> bool:
        """True while nobody else can possibly hold the job (see the module's doc)."""
        if self._expiry is None:
            return False
        with self._lock:
            held = self._held.get(job_uuid)
            if held is None or held.lost or held.replaced or held.extended_at is None:
                return False
            return _now() - held.extended_at < self._expiry * LEASE_SAFE_FRACTION

    def attach_engine(self, job, engine) -> None:
        """The engine running ``job``: suspended if the claim is lost."""
        with self._lock:
            held = self._held.get(job.uuid)
            if held is not None:
                held.engine = engine
                lost = held.lost
            else:
                lost = False
        if lost:
            _suspend(engine)

    def current(self, job):
        """The job now held for ``job``: itself, or the one that replaced it."""
        with self._lock:
            held = self._held.get(job.uuid)
            return held.job if held is not None else job

    def release(self, job) -> bool:
        """Stop extending ``job``; returns True when its claim was lost meanwhile.

        Waits for an extension in flight: the conductor consumes the job once
        this returns, and an extension that then found the job gone would post
        a replacement job for a flow that has ended.
        """
        with self._extending, self._lock:
            held = self._held.pop(job.uuid, None)
        return bool(held and held.lost)

    def held(self) -> list[str]:
        """Uuids of the jobs being kept alive (the jobs this conductor runs now)."""
        with self._lock:
            return list(self._held)

    def lost(self, job) -> bool:
        with self._lock:
            held = self._held.get(job.uuid)
            return bool(held and held.lost)

    def extend_now(self) -> None:
        """One round of extensions (the thread calls this every interval)."""
        with self._lock:
            held_now = [h for h in self._held.values() if not h.lost]
        for held in held_now:
            self._extend(held)

    def _extend(self, held: _Held) -> None:
        with self._extending:
            self._extend_locked(held)

    def _extend_locked(self, held: _Held) -> None:
        with self._lock:
            if self._held.get(held.key) is not held:
                return  # released since the round listed it: the conductor is done
        sent_at = _now()
        job = held.job
        try:
            still_ours = self._board.extend_claim(job, self._owner, self._expiry)
            gone = not still_ours and self._gone(job)
            if gone:
                still_ours = self._replace(held)
        except Exception:
            # A board hiccup (Redis failover, database busy) is not a lost
            # claim: try again next round; the lease has slack for that.
            LOG.warning("could not extend the claim on job %s", job.uuid, exc_info=True)
            return
        if still_ours:
            with self._lock:
                held.extended_at = sent_at
            return
        LOG.error("conductor %s lost its claim on job %s (%s): suspending its engine",
                  self._owner, held.job.uuid, held.job.name)
        with self._lock:
            held.lost = True
            engine = held.engine
        if engine is not None:
            _suspend(engine)

    def _gone(self, job) -> bool:
        exists = getattr(self._board, "job_exists", None)
        return exists is not None and not exists(job)

    def _replace(self, held: _Held) -> bool:
        """Hold another job of ``held``'s flow, posted if need be; False if another owns one.

        Board errors propagate: the next round tries again.
        """
        old = held.job
        others = [j for j in self._board.iterjobs(ensure_fresh=True)
                  if j.name == old.name and j.uuid != old.uuid]
        if any(self._board.find_owner(j) not in (None, self._owner) for j in others):
            return False  # another conductor runs the flow now
        if not others:
            book = (tf_models.LogBook(old.book_name, uuid=old.book_uuid)
                    if old.book_uuid else None)
            others = [self._board.post(old.name, book=book, details=dict(old.details or {}))]
        for job in others:
            try:
                self._board.claim(job, self._owner, self._expiry)
            except (tf_exc.UnclaimableJob, tf_exc.NotFound):
                continue
            LOG.warning("job %s of flow %s left the board while conductor %s ran it: "
                        "carrying on under job %s", old.uuid, old.name, self._owner, job.uuid)
            with self._lock:
                held.job, held.replaced = job, True
            return True
        return False

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.extend_now()


def _suspend(engine) -> None:
    try:
        engine.suspend()
    except Exception:
        # Suspending writes the flow state, which the fenced backend refuses
        # for a stale owner: the engine then stops on its next checkpoint
        # anyway, refused the same way.
        LOG.info("suspending the engine of a lost job failed", exc_info=True)
