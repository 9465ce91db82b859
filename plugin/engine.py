"""The fleetflow engine: TaskFlow's parallel engine with fleetflow's parts.

Registered as ``fleetflow-parallel`` through the ``taskflow.engines`` entry
point, so ``taskflow.engines.load(flow, engine="fleetflow-parallel")`` builds
it; nothing in TaskFlow itself changes. Each speed-up lives in the part that
owns it (``docs/engine.md`` lists them with their semantics):

- the compiler (:mod:`.compiler`) and the runtime's scope walkers (:mod:`.scopes`);
- the runtime (:mod:`.runtime`): selector, waiter, scheduler, actions;
- the storage (:mod:`.storage`, :mod:`.fetch`, :mod:`.checkpoints`);
- the task pool (:mod:`.executor`);
- this class: compile with the cyclic garbage collector paused, validate
  once (:mod:`.validation`), checkpoints buffered while it runs, and the
  engine and checkpoint semantics recorded in the flow detail (:mod:`.flow_meta`).

**Garbage collector paused while compiling.** Compiling (and the per-atom
runtime set-up that follows) allocates tens of thousands of containers that
all live as long as the engine; the cyclic garbage collector keeps scanning
the whole heap meanwhile and finds nothing to free (about 40% of compile time
at 4,001 atoms). Reference counting still frees everything as usual.
"""

from __future__ import annotations

import contextlib
import gc
import threading

import fasteners
from taskflow.engines.action_engine import engine as tf_engine
from taskflow.engines.action_engine import executor as tf_executor
from taskflow.utils import misc

from fleetflow.plugin import checkpoints, compat, compiler, executor, flow_meta, validation
from fleetflow.plugin.runtime import Runtime
from fleetflow.plugin.storage import Storage

NAME = "fleetflow-parallel"
#: Bumped whenever what the engine stores, or when, changes (recorded in flow details).
VERSION = 1

_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector for the block (nestable, thread-safe).

    The collector is enabled again when the last concurrent pauser leaves,
    and only if it was enabled when the first one came in.
    """
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


class FleetflowParallelEngine(tf_engine.ParallelActionEngine):
    """TaskFlow's ``ParallelActionEngine`` with fleetflow's parts (see the module's doc).

    Refuses to start (:class:`~.compat.UnsupportedTaskFlow`) on a TaskFlow
    outside the tested series; ``engines.engine_name`` falls back to the stock
    ``parallel`` engine before it gets here.
    """

    _default_executor_cls = executor.TaskExecutor
    _executor_str_matchers = [
        tf_engine._ExecutorTextMatch(frozenset(["thread", "threads", "threaded"]),
                                     executor.TaskExecutor),
        tf_engine._ExecutorTextMatch(frozenset(["greenthread", "greenthreads",
                                                "greenthreaded"]),
                                     tf_executor.ParallelGreenThreadTaskExecutor),
    ]

    def __init__(self, flow, flow_detail, backend, options):
        reason = compat.unsupported_reason()
        if reason is not None:
            raise compat.UnsupportedTaskFlow(f"{reason}; run it with engine 'parallel'")
        super().__init__(flow, flow_detail, backend, options)
        self._compiler = compiler.PatternCompiler(flow)

    @misc.cachedproperty
    def storage(self):
        """TaskFlow's engine storage, as :class:`~.storage.Storage`."""

        def _scope_fetcher(atom_name):
            if self._compiled:
                return self._runtime.fetch_scopes_for(atom_name)
            return None

        return Storage(self._flow_detail, backend=self._backend, scope_fetcher=_scope_fetcher)

    @fasteners.locked
    def compile(self):
        """Stock ``compile`` with this engine's runtime, the collector paused meanwhile."""
        if self._compiled:
            return
        with gc_paused():
            self._compilation = self._check_compilation(self._compiler.compile())
            self._runtime = Runtime(self._compilation, self.storage, self.atom_notifier,
                                    self._task_executor, self._retry_executor,
                                    options=self._options)
            self._runtime.compile()
        self._compiled = True

    @fasteners.locked
    @tf_engine._pre_check(check_validated=False)
    def validate(self):
        """Stock ``validate``, done once: a flow that validated stays valid."""
        if self._validated:
            return
        validation.validate(self)
        self._validated = True

    def run_iter(self, timeout=None):
        """Stock ``run_iter``, its checkpoints stored in batches, the engine recorded."""
        written_by = (self.storage._flowdetail.meta or {}).get(flow_meta.ENGINE_KEY)
        version = flow_meta.version_of(written_by, NAME)
        if version is not None and version > VERSION:
            raise flow_meta.NewerEngineVersion(
                f"flow {self.storage.flow_uuid} was written by {written_by}, newer than "
                f"{flow_meta.label(NAME, VERSION)}: resume it with that version or later")
        flow_meta.record_engine(self.storage, flow_meta.label(NAME, VERSION), flow_meta.BATCHED)
        return checkpoints.buffered_run(self.storage, super().run_iter(timeout=timeout))
