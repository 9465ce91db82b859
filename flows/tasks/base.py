"""The base of every fleetflow task: fence plumbing and deterministic crash points.

**Fence.** A conductor injects a fresh fencing token into the store each time
it takes a job (``flows.keys.FENCE``). A task that writes a side effect
declares a ``fence`` argument and hands it on to the write (the placement
store, a host RPC), which refuses it once a newer owner exists.

**Crash points.** Crash tests must kill a conductor at exact places, not just
at random times. With ``FLEETFLOW_CRASH_AT="<atom name>:<point>"`` (several
separated by commas) the process kills itself with SIGKILL when atom
``<atom name>`` reaches ``<point>``:

=================  ========================================================
before-execute     the atom is RUNNING (checkpointed), its execute not begun
after-effect       execute finished its side effect; the result is not saved
after-checkpoint   the atom's SUCCESS and result are saved
during-revert      revert undid its side effect; REVERTED is not saved
after-commit       the submission's rows and intent are committed; its flow
                   is not saved or posted yet (the atom name is the name of
                   the flow submitted, e.g. ``provision``)
member-claimed     in a task building a group of instances (or moving a
                   group of servers), the first member whose claim holds
                   and is recorded; build (move) not sent
member-built       ... the first member built; its ACTIVE not written
member-moved       ... the first member moved; not confirmed, not DONE
member-undone      ... the first failed try undone (guest destroyed, claim
                   released; move undone, source given back); the row
                   still names the host
=================  ========================================================

``before-execute``, ``after-effect`` and ``during-revert`` fire inside
:class:`FleetTask` and :class:`FleetRetry`; ``after-checkpoint`` needs a listener
(:class:`CrashPointListener`), which conductors attach when the variable is set;
``after-commit`` fires in the submitting process (persistence/intents.py).
Nothing happens when the variable is unset: production code pays one dict lookup.
The variable and the points are defined in common/crash_points.py, so that the
persistence layer can fire ``after-commit`` without importing the flows.

**Database outages.** Every task and retry here is idempotent by design (it
may run twice after a crash), so one that meets a lost database connection
is simply run again, whole, with backoff, for up to ``[database]
max_retry_seconds`` (the runtime's database's window; with no runtime
installed nothing is retried). ``before-execute`` fires at the start of each
attempt, as it would before a re-run after a crash; ``after-effect`` and
``during-revert`` fire once, after the attempt that succeeded. Once the
window is over the task raises ``DatabaseUnavailable``, which the engine
does not record as the task's failure: the flow stops unreverted and its job
is left for another run (``persistence.db_retry`` says why).
"""

from __future__ import annotations

import functools
import logging

from oslo_utils import reflection
from taskflow import retry, task
from taskflow import states as tf_states
from taskflow.listeners import base as listener_base

from fleetflow.common.crash_points import (
    AFTER_CHECKPOINT,
    AFTER_EFFECT,
    BEFORE_EXECUTE,
    DURING_REVERT,
    crash_targets,
    maybe_crash,
)
from fleetflow.flows import runtime
from fleetflow.persistence import db_retry
from fleetflow.plugin.atoms import FastAtom

LOG = logging.getLogger(__name__)

def _retry_policy() -> db_retry.RetryPolicy | None:
    """The installed runtime's database retry window; None: no runtime, no retries."""
    try:
        rt = runtime.get()
    except RuntimeError:
        return None
    policy = getattr(rt.database, "retry_policy", None)
    if isinstance(policy, db_retry.RetryPolicy):
        return policy
    return db_retry.RetryPolicy.from_conf(rt.conf) if rt.conf is not None else None


def _wrap(method, first: str | None, last: str | None, verb: str):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        def attempt():
            if first:
                maybe_crash(self.name, first)
            return method(self, *args, **kwargs)

        policy = _retry_policy()
        if policy is None:
            result = attempt()
        else:
            result = policy.run(attempt, f"{verb} {self.name}")
        if last:
            maybe_crash(self.name, last)
        return result
    return wrapper


def _add_crash_points(cls) -> None:
    if "execute" in cls.__dict__:
        cls.execute = _wrap(cls.__dict__["execute"], BEFORE_EXECUTE, AFTER_EFFECT, "running")
    if "revert" in cls.__dict__:
        cls.revert = _wrap(cls.__dict__["revert"], None, DURING_REVERT, "reverting")


_revert_args: dict = {}


def _args_taken(method) -> frozenset:
    """The names a method declares (``**kwargs`` names none), once per function."""
    function = getattr(method, "__func__", method)
    taken = _revert_args.get(function)
    if taken is None:
        taken = _revert_args[function] = frozenset(
            reflection.get_callable_args(method, required_only=False))
    return taken


class FleetTask(FastAtom, task.Task):
    """Base class of fleetflow tasks.

    Subclasses write ``execute`` / ``revert`` as usual; this class wraps them
    with the crash points and the outage retries above (``functools.wraps``
    keeps their signatures, which TaskFlow reads to find a task's requirements),
    and works out its argument mappings once per shape
    (:class:`fleetflow.plugin.atoms.FastAtom`).

    **A revert maps only what it names.** TaskFlow binds a task's revert with
    its ``rebind`` too (``revert_rebind or rebind``), so a revert taking
    ``**kwargs`` would still require every rebound name. Here a rebind applies
    to the revert only for the arguments the revert itself declares. That is
    what lets a revert do without a value its chain's retry provides: a
    REVERTED retry's results are wiped, and a revert left unfinished by a
    crash may run again after that (docs/adding-a-flow.md, "1. Tasks").
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _add_crash_points(cls)

    def _build_arg_mapping(self, executor, requires=None, rebind=None, auto_extract=True,
                           ignore_list=None):
        if isinstance(rebind, dict) and rebind and executor == self.revert:
            taken = _args_taken(executor)
            rebind = {arg: bound for arg, bound in rebind.items() if arg in taken}
        return super()._build_arg_mapping(executor, requires=requires, rebind=rebind,
                                          auto_extract=auto_extract, ignore_list=ignore_list)


class FleetRetry(FastAtom, retry.Retry):
    """Base class of fleetflow retry controllers: the same wrapping as FleetTask.

    A retry is an atom with its own checkpoints (and its execute may write:
    a reschedule records why nothing was left), so crash tests stop there too.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _add_crash_points(cls)


class CrashPointListener(listener_base.Listener):
    """Fires the ``after-checkpoint`` crash point once an atom's SUCCESS is saved.

    TaskFlow notifies atom listeners once storage has taken the new state;
    an engine that stores checkpoints in batches (``fleetflow-parallel``,
    ``plugin.checkpoints``) is asked to store them first, so the SUCCESS
    is in the database when the process dies.
    """

    def __init__(self, engine):
        super().__init__(engine, task_listen_for=(tf_states.SUCCESS,),
                         flow_listen_for=(), retry_listen_for=(tf_states.SUCCESS,))

    def _crash_after_checkpoint(self, atom_name: str) -> None:
        if (atom_name, AFTER_CHECKPOINT) in crash_targets():
            flush = getattr(self._engine.storage, "flush_checkpoints", None)
            if flush is not None:
                flush()
        maybe_crash(atom_name, AFTER_CHECKPOINT)

    def _task_receiver(self, state, details):
        self._crash_after_checkpoint(details["task_name"])

    def _retry_receiver(self, state, details):
        self._crash_after_checkpoint(details["retry_name"])
