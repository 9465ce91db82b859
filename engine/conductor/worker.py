"""Conductor workers: TaskFlow's blocking conductor with leases, fences and a pause.

A worker claims a job from the board (engine/jobboard/boards.py), rebuilds the flow
from its flow detail (flows/registry.py) and runs it; the workers of one
process are started by engine/conductor/pool.py. On top of TaskFlow's
``BlockingConductor`` it adds, per job:

1. **keep-alive**: the claim is extended every ``[jobboard] keepalive_interval``
   while the job runs (engine/conductor/keepalive.py);
2. **fencing**: a new token from ``fences.advance(flow id, owner)`` is injected
   into the store under ``keys.FENCE`` for every task to hand to its side
   effects, and the engine checkpoints through engine/fencing.py;
3. **on_error = pause**: the flow stops (SUSPENDED) at its first final
   failure (not one a retry absorbs), before anything is reverted, and its
   job is consumed so no other conductor resumes (and so reverts) it; an
   operator decides (engine/conductor/pause.py);
4. the ``after-checkpoint`` crash point of the crash tests (flows/tasks/base.py);
5. **wake-up on post**: an idle worker looks at the board every 0.5 s
   (TaskFlow's wait); a job posted in the same process (``fleetflow serve``)
   wakes the process's workers at once (:func:`wake_local_conductors`);
6. **consume only what is recorded**: after a run the flow detail is read
   back, and the job is consumed only when it says the flow is over
   (SUCCESS, REVERTED, FAILURE) or paused; otherwise, or when it cannot be
   read, the job is abandoned for another run. The job finished is the one
   the keep-alive holds: a replacement if the board lost the first;
7. **one run per flow**: a job whose flow an older job, claimed by a live
   conductor, is running already is a duplicate (a re-post raced with
   another, engine/reconcile.py): it is consumed without running, rather
   than fencing the running owner out.
8. **the flow's listeners**: the listeners the job's flow declared when it
   was registered (flows/registry.py ``listeners_of``), such as the status
   listener that keeps a reservation's row in step with its flow;
9. **metrics**: every job claimed and every atom ended is counted
   (engine/conductor/metrics.py, docs/console.md).

``ENGINE_FACTORY`` is the one seam through which every engine is made.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import weakref
from collections.abc import Callable

from taskflow import states as tf_states
from taskflow.conductors.backends import impl_blocking, impl_executor
from taskflow.types import timing

from fleetflow.common import metrics
from fleetflow.common.crash_points import CRASH_ENV
from fleetflow.engine.backend import get_backend
from fleetflow.engine.conductor.keepalive import ClaimKeepAlive, ClaimLost
from fleetflow.engine.conductor.log import ConductorLog
from fleetflow.engine.conductor.metrics import AtomMetricsListener
from fleetflow.engine.conductor.pause import PauseOnErrorListener
from fleetflow.engine.fencing import FencedBackend
from fleetflow.engine.jobboard.boards import make_jobboard
from fleetflow.flows import keys, registry
from fleetflow.flows.tasks.base import CrashPointListener
from fleetflow.persistence import fences
from fleetflow.persistence.db import get_database
from fleetflow.plugin import flow_meta
from fleetflow.plugin.flow_meta import ON_ERROR_PAUSE, SETTLED_FLOW_STATES

LOG = logging.getLogger(__name__)

# Ends that a stopped run may have written too early (see _ended_early).
ENDED_EARLY_STATES = frozenset({tf_states.SUCCESS, tf_states.REVERTED})
UNFINISHED_ATOM_STATES = frozenset({tf_states.RUNNING, tf_states.REVERTING})


def default_engine_factory(flow_detail, store: dict, backend, conf):
    """Rebuild the flow of ``flow_detail`` and load it into an engine (not compiled).

    engine/engines.py gives the engine (``[conductor] engine``) and its options
    (``[conductor] engine_workers`` threads).
    """
    from fleetflow.engine.engines import load_from_detail

    return load_from_detail(flow_detail, backend, conf, store=store)


#: The seam: every conductor makes its engines with this callable
#: ``(flow_detail, store, backend, conf) -> engine``. Replace it (or pass
#: ``engine_factory=`` to a conductor) to change engines everywhere at once.
ENGINE_FACTORY: Callable = default_engine_factory


def default_name(conf) -> str:
    """``[conductor] name``, else host name and pid."""
    return conf.conductor.name or f"{socket.gethostname()}-{os.getpid()}"


class WakeableTimeout(timing.Timeout):
    """The conductor's idle wait, which :meth:`wake` also ends (stopping still does)."""

    def __init__(self, value):
        super().__init__(value)
        self._poke = threading.Event()
        self._waiting = False

    def wake(self) -> None:
        self._poke.set()

    def wake_if_idle(self) -> bool:
        """End the wait if one is under way and nobody ended it yet: whether it did."""
        if not self._waiting or self._poke.is_set():
            return False
        self._poke.set()
        return True

    def interrupt(self):
        super().interrupt()
        self._poke.set()

    def wait(self):
        self._waiting = True
        try:
            self._poke.wait(self._value)
        finally:
            self._waiting = False
            self._poke.clear()


_local_conductors: weakref.WeakSet = weakref.WeakSet()
_waking = threading.Lock()


def wake_local_conductors() -> None:
    """Have one of this process's idle conductors look at the board now (a job was
    posted); every one of them when none is idle.

    One is enough for one job: waking every idle conductor had each list the
    board and all but one lose the race for the claim. When none is idle, a busy
    one lists the board once its job is done, and one between a listing and its
    wait must not sleep through the job (its next wait returns at once).
    """
    with _waking:
        conductors = list(_local_conductors)
        if any(conductor.wake_if_idle() for conductor in conductors):
            return
        for conductor in conductors:
            conductor.wake()


class FleetConductor(impl_blocking.BlockingConductor):
    """A blocking TaskFlow conductor with claim keep-alive, fencing and pause-on-error."""

    def __init__(self, name: str, jobboard, persistence, conf, database=None,
                 engine_factory: Callable | None = None, wait_timeout: float | None = None):
        super().__init__(name, jobboard, persistence=persistence, wait_timeout=wait_timeout,
                         log=ConductorLog(impl_executor.LOG, jobboard))
        self._wait_timeout = WakeableTimeout(self._wait_timeout.value)
        _local_conductors.add(self)
        self._conf = conf
        self._database = database or get_database(conf)
        self._engine_factory = engine_factory
        self._keepalive = ClaimKeepAlive(jobboard, name, conf.jobboard.keepalive_interval,
                                         float(conf.jobboard.claim_expiry))
        self._pause_listeners: dict[str, PauseOnErrorListener] = {}
        self._job_options: dict[str, dict] = {}
        # Job uuid -> the job the keep-alive posted in its place (board lost it).
        self._replacements: dict[str, object] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def jobboard(self):
        return self._jobboard

    @property
    def keepalive(self) -> ClaimKeepAlive:
        return self._keepalive

    def wake(self) -> None:
        """End an idle wait now: there may be a job on the board."""
        self._wait_timeout.wake()

    def wake_if_idle(self) -> bool:
        """End this conductor's idle wait if it is in one nobody ended: whether it was."""
        return self._wait_timeout.wake_if_idle()

    def run(self, max_dispatches=None):
        self._keepalive.start()
        try:
            super().run(max_dispatches=max_dispatches)
        finally:
            self._keepalive.stop()

    def _dispatch_job(self, job):
        # TaskFlow's loop dispatches each job it claimed, once: a claim won.
        metrics.CLAIMS.labels(self._jobboard.name).inc()
        if self._already_settled(job):
            return True
        if self._runs_elsewhere(job):
            return True
        # Extend the claim from the moment we run the job (rebuilding a big
        # flow takes time too) until the conductor has consumed/abandoned it.
        self._keepalive.hold(job)
        try:
            consume = super()._dispatch_job(job)
        except ClaimLost:
            LOG.warning("conductor %s lost its claim on job %s before running it: left to "
                        "its new owner", self._name, job.uuid)
            consume = False
        finally:
            current = self._keepalive.current(job)
            lost = self._keepalive.release(job)
            paused = self._pause_listeners.pop(job.uuid, None)
            self._job_options.pop(job.uuid, None)
            if current is not job:
                self._replacements[job.uuid] = current
        if lost:
            # Someone else runs it now; consuming would fail anyway.
            return False
        # NOTE: a paused flow is consumed too: abandoning would let the next
        # conductor resume it, and resuming a paused flow reverts it. The
        # operator's resume / revert re-posts a job for it.
        if not consume and not (paused is not None and paused.paused):
            return False
        return self._end_recorded(job)

    def _end_recorded(self, job) -> bool:
        """True when the stored flow detail says the flow is over or paused.

        What the engine believes is not enough: its last write (SUCCESS, the
        pause) may have failed, and a consumed job of an unfinished flow
        would leave nobody to finish it.
        """
        flow_id = (job.details or {}).get("flow_uuid") or job.name
        try:
            with contextlib.closing(self._persistence.get_connection()) as conn:
                flow_detail = conn.get_flow_details(flow_id, lazy=True)
        except Exception:
            LOG.warning("flow %s: its final state could not be read back; abandoning job "
                        "%s for another run", flow_id, job.uuid, exc_info=True)
            return False
        paused = flow_meta.is_paused(flow_detail.meta)
        if flow_detail.state in ENDED_EARLY_STATES and self._wait_timeout.is_stopped():
            return not self._ended_early(flow_id)
        if flow_detail.state in SETTLED_FLOW_STATES or paused:
            return True
        LOG.warning("flow %s is %s in storage after its run: abandoning job %s, not "
                    "consuming it", flow_id, flow_detail.state, job.uuid)
        return False

    def _ended_early(self, flow_id: str) -> bool:
        """True (and the flow set back to SUSPENDED) when a stopped run wrote an end
        that its atoms contradict.

        A conductor stopped just as it resumed a flow that a dead conductor
        left mid-atom ends the run before scheduling anything; TaskFlow's
        end-of-run check does not count the atoms queued to resume, finds no
        atom left to run, and records REVERTED (or SUCCESS) with an atom still
        RUNNING and nothing undone. Consumed, that flow would never be
        finished nor reverted; set back to SUSPENDED, the next conductor
        resumes it.
        """
        try:
            with contextlib.closing(self._persistence.get_connection()) as conn:
                flow_detail = conn.get_flow_details(flow_id)
                left = sorted(atom.name for atom in flow_detail
                              if atom.state in UNFINISHED_ATOM_STATES)
                if not left:
                    return False
                flow_detail.state = tf_states.SUSPENDED
                conn.update_flow_details(flow_detail)
        except Exception:
            LOG.warning("flow %s: could not check its atoms after a stopped run; "
                        "abandoning its job", flow_id, exc_info=True)
            return True
        LOG.warning("flow %s read %s after a stopped run with %s unfinished: set back to "
                    "SUSPENDED for the next conductor", flow_id, flow_detail.state,
                    ", ".join(left[:5]))
        return True

    def _runs_elsewhere(self, job) -> bool:
        """True when an older job of the same flow is claimed by another live conductor."""
        try:
            for other in self._jobboard.iterjobs(ensure_fresh=True):
                if (other.name != job.name or other.uuid == job.uuid
                        or _posting_order(other) >= _posting_order(job)):
                    continue
                owner = self._jobboard.find_owner(other)
                if owner is not None and owner != self._name:
                    LOG.info("flow %s runs under job %s (%s): job %s is a duplicate, "
                             "consumed", job.name, other.uuid, owner, job.uuid)
                    return True
        except Exception:
            LOG.debug("could not look for other jobs of flow %s", job.name, exc_info=True)
        return False

    def _try_finish_job(self, job, consume, trash=False):
        """Consume (or abandon) the job the keep-alive ended up holding; never raise.

        A board that cannot be reached is no reason to stop the conductor:
        the claim expires and the job is run again, or the reconciler posts
        one for the flow.
        """
        job = self._replacements.pop(job.uuid, job)
        try:
            super()._try_finish_job(job, consume, trash)
        except Exception:
            LOG.warning("could not %s job %s of flow %s", "consume" if consume else "abandon",
                        job.uuid, job.name, exc_info=True)

    def _already_settled(self, job) -> bool:
        """True when the job's flow must not run again: consume the job instead.

        A conductor can die after its flow ended and before it consumed the
        job; the next one then finds a SUCCESS, REVERTED or FAILURE flow
        detail, and TaskFlow would run a REVERTED (or FAILURE) flow again from
        scratch, repeating every side effect. A paused flow waits for an
        operator, who re-posts it after resetting it.
        """
        flow_detail = self._flow_detail_from_job(job)
        paused = flow_meta.is_paused(flow_detail.meta)
        if flow_detail.state in SETTLED_FLOW_STATES or paused:
            LOG.info("flow %s is %s%s already: consuming job %s without running it",
                     flow_detail.uuid, flow_detail.state, " (paused)" if paused else "",
                     job.uuid)
            return True
        return False

    def _engine_from_job(self, job):
        flow_detail = self._flow_detail_from_job(job)
        self._job_options[job.uuid] = flow_meta.options(flow_detail.meta)
        # Taking the fence from whoever holds the job now would make the true
        # owner's side effects fail while this engine ran beside it.
        self._refuse_if_lost(job)
        with self._database.session() as session:
            fence = fences.advance(session, flow_detail.uuid, self._name)
        LOG.info("conductor %s runs flow %s (job %s) with fence token %s",
                 self._name, flow_detail.uuid, job.uuid, fence["token"])
        store = {}
        store.update((flow_detail.meta or {}).get("store", {}))
        store.update((job.details or {}).get("store", {}))
        store[keys.FENCE] = fence
        store[keys.FLOW_ID] = flow_detail.uuid
        backend = FencedBackend(self._persistence, self._database, fence,
                                lease=functools.partial(self._keepalive.lease_valid, job.uuid))
        factory = self._engine_factory or ENGINE_FACTORY
        engine = factory(flow_detail, store, backend, self._conf)
        # Lost while the fence advanced: an engine not yet running ignores a suspend.
        self._refuse_if_lost(job)
        self._keepalive.attach_engine(job, engine)
        return engine

    def _refuse_if_lost(self, job) -> None:
        if self._keepalive.lost(job):
            raise ClaimLost(f"job {job.uuid}")

    def _listeners_from_job(self, job, engine):
        listeners = super()._listeners_from_job(job, engine)
        listeners.append(AtomMetricsListener(engine))
        options = self._job_options.get(job.uuid, {})
        # What the flow declared, e.g. its rows following it: PAUSED, BUILDING again.
        listeners.extend(
            factory(engine, self._database,
                    paused=lambda: flow_meta.is_paused(engine.storage.flow_meta))
            for factory in registry.listeners_of(options.get("flow_name", "")))
        if options.get("on_error") == ON_ERROR_PAUSE:
            pause = PauseOnErrorListener(engine)
            self._pause_listeners[job.uuid] = pause
            listeners.append(pause)
        if CRASH_ENV in os.environ:
            listeners.append(CrashPointListener(engine))
        return listeners


def _posting_order(job) -> tuple:
    return (getattr(job, "sequence", 0) or 0, str(job.uuid))


def make_conductor(conf, name: str | None = None, persistence=None,
                   engine_factory: Callable | None = None,
                   wait_timeout: float | None = None) -> FleetConductor:
    """A conductor with its own (connected) board on ``conf``'s backends."""
    persistence = persistence or get_backend(conf)
    board = make_jobboard(conf, persistence)
    return FleetConductor(name or default_name(conf), board, persistence, conf,
                          engine_factory=engine_factory, wait_timeout=wait_timeout)
