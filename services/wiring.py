"""What an API process is built from: its database and the services its routes call.

The API reaches rows, the engine and placement only through services
(docs/architecture.md, "Packages and layers"), so the pieces below them (the
database, TaskFlow's logbook backend, the jobboard, the flows' clients) are
put together here: :func:`build` for a distributed deployment's API process
(``fleetflow.api.wsgi``), :func:`make_services` for any process that already
holds those pieces (``fleetflow serve``).
"""

from __future__ import annotations


def database(conf):
    """The process-wide ``Database`` of ``[database] connection``, schema as it is."""
    from fleetflow.persistence.db import get_database

    return get_database(conf)


def make_services(conf, database, runtime, persistence, board) -> dict:
    """The services the API's routes use (:mod:`fleetflow.api.state`).

    ``runtime``: the flows' clients (``flows.runtime.install_from_conf``);
    ``persistence``: TaskFlow's logbook backend; ``board``: the jobboard
    requests post their flows to.
    """
    from fleetflow.engine.submit import Submitter
    from fleetflow.services.evacuations import EvacuationOps
    from fleetflow.services.hosts import HostOps
    from fleetflow.services.recovery.ops import RecoveryOps
    from fleetflow.services.reservations import ReservationOps
    from fleetflow.services.vclusters import VClusterOps

    submit = Submitter(board, persistence)
    store = getattr(runtime.placement, "store", None)
    hosts = HostOps(conf, database, store, runtime.compute)
    services = {
        "reservations": ReservationOps(conf, database, submit),
        "job_submitter": submit,
        "placement_store": store,
        "compute_rpcapi": runtime.compute,
        "jobboard": board,
        "logbook_backend": persistence,
        "evacuations": EvacuationOps(conf, database, submit, compute=runtime.compute,
                                     on_host_state=hosts.sync_placement,
                                     placement=runtime.placement),
        "hosts": hosts,
        "vclusters": VClusterOps(conf, database, submit),
    }
    services["recoveries"] = RecoveryOps(conf, database, services["evacuations"])
    return services


def recovery_monitor(conf, database, runtime, services: dict | None = None,
                     persistence=None, board=None, name: str | None = None):
    """The started recovery monitor of a conductor process; None when ``[recovery]
    enabled`` is false. ``services``: those of :func:`make_services` when the
    process has them (``fleetflow serve``); else they are made here from
    ``persistence`` and ``board``."""
    if not conf.recovery.enabled:
        return None
    from fleetflow.engine.conductor.worker import default_name
    from fleetflow.services.recovery.monitor import RecoveryMonitor

    if services is None:
        services = make_services(conf, database, runtime, persistence, board)
    return RecoveryMonitor(conf, database, services["evacuations"], services["hosts"],
                           runtime.compute, name or default_name(conf)).start()


def build(conf) -> tuple:
    """``(database, services)`` of a distributed deployment's API process.

    It runs no conductors and changes no schema: a database whose schema is
    not current is refused (``fleetflow db upgrade`` comes first).
    """
    from fleetflow.engine.backend import get_backend
    from fleetflow.engine.jobboard.boards import make_jobboard
    from fleetflow.flows import runtime
    from fleetflow.persistence import migrate

    db = database(conf)
    if not migrate.is_current(db.engine):
        raise RuntimeError("the database schema is not current: run "
                           "'fleetflow db upgrade' before starting the API")
    rt = runtime.install_from_conf(conf, db)
    persistence = get_backend(conf)
    board = make_jobboard(conf, persistence)
    return db, make_services(conf, db, rt, persistence, board)


def placement_client(conf, database, store=None):
    """The placement a process serves (its ``store``), else what the configuration names."""
    from fleetflow.persistence.placement.client import LocalPlacement, from_conf

    if store is not None:
        return LocalPlacement(store)
    return from_conf(conf, database)
