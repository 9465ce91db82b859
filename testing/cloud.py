"""A small real cloud in one process, and flows run to their end on it.

Real pieces throughout: an upgraded SQLite database with a fleet loaded and
registered in the placement store, the simulated hosts served over the
in-process oslo.messaging transport, the placement and compute clients that
tasks use. Only TaskFlow's persistence is its in-memory backend, so a flow
runs start to end in the test's own thread, without conductors or a jobboard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

from taskflow import exceptions as tf_exc

from fleetflow.common import ids
from fleetflow.testing.fleets import SMALL_FLEET


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


@dataclasses.dataclass
class FakeCloud:
    """The cloud :func:`fake_cloud` builds; its runtime is the installed one.

    ``posted`` lists every job submitted through :meth:`submit` (what a
    service such as ``ReservationOps`` would have posted to the jobboard), each a
    dict of ``flow``, ``kwargs``, ``store`` and ``flow_id``; :meth:`run`
    runs one.
    """

    conf: object
    database: object
    runtime: object
    agent: object
    posted: list = dataclasses.field(default_factory=list)
    #: The TaskFlow engine :meth:`run` uses unless told otherwise; None: ``[conductor] engine``.
    engine: str | None = None

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

    def run(self, job, fence=None, engine: str | None = None, workers: int = 8) -> str:
        """Run a posted job to its end on TaskFlow's in-memory backend.

        ``job`` is one of :attr:`posted`, or any dict with the registered flow
        name (``flow``), its ``kwargs`` and its ``store``. Returns the flow's
        final state: SUCCESS, or REVERTED when it failed and rolled back.
        """
        from fleetflow.flows import registry

        return self.run_flow(registry.build(job["flow"], **job["kwargs"]),
                             store=job.get("store"), fence=fence, engine=engine,
                             workers=workers)

    def run_flow(self, flow, store=None, fence=None, engine: str | None = None,
                 workers: int = 8) -> str:
        """Run ``flow`` (built by the caller) to its end; returns its final state.

        ``engine``: ``fleetflow-parallel``, ``parallel`` (TaskFlow's stock
        parallel engine) or ``serial``; by default :attr:`engine`.
        """
        import taskflow.engines

        from fleetflow.common import crash_points
        from fleetflow.engine import engines
        from fleetflow.flows import keys
        from fleetflow.flows.tasks import base

        store = dict(store or {})
        if fence is not None:
            store[keys.FENCE] = fence
        options = engines.engine_options(self.conf, workers=workers,
                                         engine=engine or self.engine)
        loaded = taskflow.engines.load(flow, store=store, **options)
        with contextlib.ExitStack() as stack:
            if crash_points.CRASH_ENV in os.environ:
                # As a conductor does: the after-checkpoint points fire too.
                stack.enter_context(base.CrashPointListener(loaded))
            # A failed flow raises once it has reverted; its state says what happened.
            with contextlib.suppress(tf_exc.WrappedFailure, Exception):
                loaded.run()
        return loaded.storage.get_flow_state()

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
    from fleetflow.persistence.db import Database
    from fleetflow.persistence.placement.client import from_conf as placement_from_conf

    database = Database.from_conf(conf)
    database.upgrade()
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
