"""A small real cloud in one process, and flows run to their end on it.

Real pieces throughout: an upgraded SQLite database with a fleet loaded and
registered in the placement store, the simulated hosts served over the
in-process oslo.messaging transport, the placement and compute clients that
tasks use. Only TaskFlow's persistence is its in-memory backend, kept by the
cloud, so a flow runs start to end in the test's own thread, without
conductors or a jobboard, and one stopped half way can be resumed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from concurrent import futures

from taskflow import exceptions as tf_exc

from fleetflow.common import ids
from fleetflow.flows import keys
from fleetflow.testing import outcome
from fleetflow.testing.crash_points import CrashPointReached
from fleetflow.testing.fleets import SMALL_FLEET
from fleetflow.testing.outcome import Outcome


def isolated_conf(directory, **groups):
    """A configuration whose every file lives in ``directory``.

    ``groups`` override options by group, ``DEFAULT`` for the ungrouped ones:
    ``isolated_conf(tmp_path, compute={"boot_seconds": 0.1})``. No variable of the
    environment and no policy file outside ``directory`` is read.
    """
    from fleetflow.common import config

    directory = os.fspath(directory)
    conf = config.load(args=[], environ={})
    conf.set_override("state_dir", directory)
    conf.set_override("connection", f"sqlite:///{os.path.join(directory, 'fleetflow.db')}",
                      group="database")
    conf.set_override("policy_file", os.path.join(directory, "policy.yaml"), group="api")
    for group, values in groups.items():
        for key, value in values.items():
            conf.set_override(key, value, group=None if group == "DEFAULT" else group)
    return conf


def _memory_backend():
    from taskflow.persistence.backends import impl_memory

    return impl_memory.MemoryBackend()


@dataclasses.dataclass
class FakeCloud:
    """The cloud :func:`fake_cloud` builds; its runtime is the installed one.

    ``posted`` lists every job submitted through :meth:`submit` (what a
    service such as ``ReservationOps`` would have posted to the jobboard), each a
    dict of ``flow``, ``kwargs``, ``store`` and ``flow_id``; :meth:`run`
    runs one, and :meth:`resume` runs on a flow that stopped half way.
    """

    conf: object
    database: object
    runtime: object
    agent: object
    #: TaskFlow's in-memory persistence backend: the logbook of every flow run here.
    backend: object = dataclasses.field(default_factory=_memory_backend, repr=False)
    posted: list = dataclasses.field(default_factory=list)
    #: The TaskFlow engine :meth:`run` uses unless told otherwise; None: ``[conductor] engine``.
    engine: str | None = None
    #: The flows :meth:`run_flow` was given, by flow id: they have no factory to rebuild them.
    _flows: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def driver(self):
        """The simulated hosts' driver (their guests, volumes and faults)."""
        return self.agent.driver

    def submit(self, flow_name, flow_kwargs, store=None, tenant_id=None, flow_id=None,
               **options):
        """A ``submit`` for fleetflow's services: records the job, returns its flow id."""
        flow_id = flow_id or ids.new_uuid()
        self.posted.append({"flow": flow_name, "kwargs": flow_kwargs, "store": store,
                            "flow_id": flow_id})
        return flow_id

    def reserve(self, count: int, flavor: str = "m1.small", **fields):
        """Create a reservation the way the API does; returns (its id, its posted job).

        ``fields`` are those of ``ReservationRequest`` (``policy``,
        ``capabilities``, ``group_id``, ``volume_gb``, ``min_count``,
        ``tenant_id`` ...); the image is ``cirros``.
        """
        from fleetflow.services.reservations import ReservationOps, ReservationRequest

        ops = ReservationOps(self.conf, self.database, submit=self.submit)
        req = ReservationRequest(tenant_id=fields.pop("tenant_id", "t1"), user_id="u1",
                                 flavor_ref=flavor, image_ref="cirros",
                                 min_count=fields.pop("min_count", count), max_count=count,
                                 **fields)
        reservation, _ = ops.reserve(req)
        return reservation.id, self.posted[-1]

    def run(self, job, fence=None, engine: str | None = None, workers: int = 8) -> Outcome:
        """Run a posted job to its end; returns its :class:`~fleetflow.testing.Outcome`.

        ``job`` is one of :attr:`posted`, or any dict with the registered flow
        name (``flow``), its ``kwargs``, its ``store`` and, optionally, its
        ``flow_id``. The outcome's state is SUCCESS, or REVERTED when the flow
        failed and rolled back, with the atoms' failures. Whatever else the
        engine raises (a missing requirement, a bug) is raised here. A job run
        again starts afresh.
        """
        from fleetflow.flows import registry

        flow = registry.build(job["flow"], **job["kwargs"])
        detail = self._save(flow, job.get("flow_id"), factory=(job["flow"], job["kwargs"]))
        return self._run(flow, detail, job.get("store"), fence, engine, workers)

    def run_flow(self, flow, store=None, fence=None, engine: str | None = None,
                 workers: int = 8) -> Outcome:
        """Run ``flow`` (built by the caller) to its end; returns its outcome.

        ``engine``: ``fleetflow-parallel``, ``parallel`` (TaskFlow's stock
        parallel engine) or ``serial``; by default :attr:`engine`.
        """
        detail = self._save(flow, None)
        self._flows[detail.uuid] = flow
        return self._run(flow, detail, store, fence, engine, workers)

    def resume(self, stopped, fence=None, engine: str | None = None,
               workers: int = 8) -> Outcome:
        """Run a flow this cloud ran before on from its checkpoints, as a conductor would.

        ``stopped`` is the :class:`~fleetflow.testing.Outcome` of the run that
        stopped (at a crash point armed with ``stop=True``, see
        :mod:`fleetflow.testing.crash_points`), the job it ran, or its flow
        id. The flow is loaded again from the cloud's logbook, rebuilt by its
        registered factory, and only the atoms that had not finished run.
        """
        from fleetflow.engine import engines

        if isinstance(stopped, Outcome):
            flow_id = stopped.flow_id
        elif isinstance(stopped, dict):
            flow_id = stopped.get("flow_id")
        else:
            flow_id = stopped
        if flow_id is None:
            raise ValueError("resume needs the outcome of the run, or a job with a flow_id")
        detail = self._detail(flow_id)
        store = {} if fence is None else {keys.FENCE: fence}
        engine = engine or self.engine
        pool = self._stock_pool(engine, workers)
        options = {"store": store, "workers": workers, "engine": engine, **pool}
        flow = self._flows.get(flow_id)
        if flow is None:
            loaded = engines.load_from_detail(detail, self.backend, self.conf, **options)
        else:
            loaded = engines.make_engine(flow, detail, self.backend, self.conf, **options)
        return self._finish(loaded, flow_id, **pool)

    def _save(self, flow, flow_id: str | None, factory: tuple[str, dict] | None = None):
        """A new flow detail of ``flow`` in the cloud's logbook (its factory's, if any)."""
        from taskflow.engines import helpers as tf_helpers
        from taskflow.persistence import models as tf_models

        from fleetflow.flows import registry

        flow_id = flow_id or ids.new_uuid()
        book = tf_models.LogBook(f"{flow.name}-{flow_id}", uuid=flow_id)
        detail = tf_models.FlowDetail(flow.name, uuid=flow_id)
        if factory is not None:
            name, kwargs = factory
            function, args, _ = registry.factory_details(name)
            tf_helpers.save_factory_details(detail, function, args, kwargs)
        book.add(detail)
        with contextlib.closing(self.backend.get_connection()) as conn:
            with contextlib.suppress(tf_exc.NotFound):
                conn.destroy_logbook(flow_id)
            conn.save_logbook(book)
        return detail

    def _run(self, flow, detail, store, fence, engine, workers) -> Outcome:
        from fleetflow.engine import engines

        store = dict(store or {})
        if fence is not None:
            store[keys.FENCE] = fence
        engine = engine or self.engine
        pool = self._stock_pool(engine, workers)
        loaded = engines.make_engine(flow, detail, self.backend, self.conf, store=store,
                                     workers=workers, engine=engine, **pool)
        return self._finish(loaded, detail.uuid, **pool)

    def _stock_pool(self, engine: str | None, workers: int) -> dict:
        """``{"executor": pool}`` for a run on TaskFlow's stock parallel engine, else ``{}``.

        The stock engine's own pool (futurist's) wakes each idle thread once a second to
        see whether it should stop, and the engine waits for every thread as a run ends:
        about a second a run, longer than a small flow takes. The engine is the same
        with the standard library's pool, whose idle threads stop as soon as they are
        told; :meth:`_finish` shuts it down.
        """
        from fleetflow.engine import engines

        if engines.engine_name(engine, self.conf) != engines.STOCK_ENGINE:
            return {}
        return {"executor": futures.ThreadPoolExecutor(max_workers=workers,
                                                       thread_name_prefix="stock-engine")}

    def _finish(self, loaded, flow_id: str, executor=None) -> Outcome:
        """Run a loaded engine; its outcome, or what it raised that no atom's failure was."""
        from fleetflow.common import crash_points
        from fleetflow.flows.tasks import base

        with contextlib.ExitStack() as stack:
            if executor is not None:
                stack.callback(executor.shutdown, wait=True)
            if crash_points.CRASH_ENV in os.environ:
                # As a conductor does: the after-checkpoint points fire too.
                stack.enter_context(base.CrashPointListener(loaded))
            try:
                loaded.run()
            except CrashPointReached:
                # Stopped as a crash would stop it: what was saved stays for resume.
                pass
            except Exception as error:
                failed = outcome.of_failed(loaded.storage, self._detail(flow_id), error)
                if failed is None:
                    raise
                return failed
        return outcome.of(loaded.storage, self._detail(flow_id))

    def _detail(self, flow_id: str):
        """The flow detail ``flow_id`` as the cloud's logbook has it."""
        with contextlib.closing(self.backend.get_connection()) as conn:
            return conn.get_flow_details(flow_id)

    def assert_audit_clean(self, **audit_kwargs):
        """The strict audit of this cloud; AssertionError listing any mismatch."""
        from fleetflow.testing.audit import assert_audit_clean

        return assert_audit_clean(self.database, self.runtime.placement,
                                  self.runtime.compute, **audit_kwargs)


@contextlib.contextmanager
def fake_cloud(conf, fleet_doc=None):
    """Build a :class:`FakeCloud` of ``fleet_doc`` (default :data:`SMALL_FLEET`).

    ``conf`` should keep every file in a directory of the test's own
    (:func:`isolated_conf`). The flows of fleetflow are registered; the cloud's
    runtime is installed for the block (one cloud at a time per process) and
    everything is stopped and closed afterwards.
    """
    import fleetflow.flows.evacuate  # noqa: F401  (registers the flows)
    import fleetflow.flows.provision  # noqa: F401
    import fleetflow.flows.vcluster  # noqa: F401
    from fleetflow.compute import agent as compute_agent
    from fleetflow.compute import messaging
    from fleetflow.compute.rpcapi import ComputeAPI
    from fleetflow.flows import runtime
    from fleetflow.persistence import fleet
    from fleetflow.persistence.placement.client import from_conf as placement_from_conf
    from fleetflow.testing.schema import upgraded_database

    database = upgraded_database(conf)
    try:
        with database.session() as session:
            fleet.load(session, fleet.expand(fleet_doc or SMALL_FLEET))
        agent = compute_agent.serve_fleet(conf, database)
        try:
            rt = runtime.install(runtime.Runtime(conf, database,
                                                 placement_from_conf(conf, database),
                                                 ComputeAPI(conf, database)))
            try:
                yield FakeCloud(conf, database, rt, agent)
            finally:
                runtime.uninstall()
        finally:
            agent.stop()
            messaging.forget_transport(conf)
    finally:
        database.dispose()
