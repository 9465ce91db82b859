"""``fleetflow conductor``: run conductor workers until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import threading

import click

from fleetflow.cli.startup import check_config, start_metrics
from fleetflow.common import gc_policy, switching
from fleetflow.common.config import openstack_mode, simulates_hosts


def _setup_process(conf):
    """Per-process set-up a conductor needs before it runs flows; returns the
    in-process compute agent it started, or None.

    Flows whose tasks look up process-wide clients (flows/runtime.py) get
    them installed here once that module offers ``install_from_conf``.
    """
    try:
        from fleetflow.flows import runtime
    except ImportError:
        return None
    install = getattr(runtime, "install_from_conf", None)
    if install is None:
        return None
    rt = install(conf)
    # Simulated hosts on an in-process transport (embedded mode) are reachable
    # only from inside the process that serves them, so this conductor serves
    # the fleet itself. Every process opens the same fake-driver state file
    # ([compute] state_path), so they all see the same guests.
    if simulates_hosts(conf) and conf.messaging.transport_url.startswith(
            ("kombu+memory:", "fake:")):
        from fleetflow.compute.agent import serve_fleet

        return serve_fleet(conf, rt.database)
    return None


def _recovery_monitor(conf, persistence, name: str):
    """The recovery monitor of this process (``[recovery] enabled``), or None."""
    if not conf.recovery.enabled:
        return None
    from fleetflow.engine.jobboard.boards import make_jobboard
    from fleetflow.flows import runtime
    from fleetflow.services.wiring import recovery_monitor

    rt = runtime.get()
    return recovery_monitor(conf, rt.database, rt, persistence=persistence,
                            board=make_jobboard(conf, persistence), name=name)


def _start_admitter(conf, persistence, name: str):
    """The queue's admitter of this process (services/queue/admitter.py)."""
    from fleetflow.engine.jobboard.boards import make_jobboard
    from fleetflow.persistence.db import get_database
    from fleetflow.services.queue.admitter import Admitter

    board = make_jobboard(conf, persistence)
    return Admitter.for_process(conf, get_database(conf), board, persistence, name).start()


@click.command("conductor")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Conductor threads in this process, each running one flow at a time "
                   "(default: [conductor] workers, at least 1).")
@click.option("--name", default=None,
              help="Conductor name (default: [conductor] name, else host name and pid).")
@click.pass_obj
def conductor(conf, workers: int | None, name: str | None) -> None:
    """Claim flow jobs from the jobboard and run them until stopped.

    SIGTERM or SIGINT stops the workers: a running flow is suspended at its
    next atom boundary and its job handed back to the board for another
    conductor to resume. Beside them a reconciler keeps the board in step
    with the database (``[conductor] reconcile_interval``).
    """
    from fleetflow.engine.backend import get_backend
    from fleetflow.engine.conductor.pool import ConductorPool
    from fleetflow.engine.conductor.worker import default_name
    from fleetflow.engine.reconcile import Reconciler
    from fleetflow.persistence import migrate
    from fleetflow.persistence.db import get_database

    check_config(conf)
    logging.basicConfig(level=logging.DEBUG if conf.debug else logging.INFO,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s %(message)s")
    # NOTE: many conductors may start at once; the schema has one owner
    # ('fleetflow db upgrade', or 'fleetflow serve'), conductors only check it.
    if not migrate.is_current(get_database(conf).engine):
        raise click.ClickException("the database schema is not current: run "
                                   "'fleetflow db upgrade' first")
    persistence = get_backend(conf)
    agent = _setup_process(conf)
    stop = threading.Event()

    def _on_signal(signum, _frame):
        logging.getLogger(__name__).info("signal %s: stopping conductors", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    workers = workers or max(1, conf.conductor.workers)
    pool = ConductorPool(conf, workers=workers, name=name or default_name(conf),
                         persistence=persistence)
    pool.start()
    reconciler = Reconciler(conf, persistence, name=name or default_name(conf)).start()
    recovery = _recovery_monitor(conf, persistence, name or default_name(conf))
    admitter = _start_admitter(conf, persistence, name or default_name(conf))
    cloud_sync = None
    if openstack_mode(conf):
        from fleetflow.services.sync import PeriodicSync

        cloud_sync = PeriodicSync(conf, get_database(conf)).start()
    from fleetflow.engine.jobboard.boards import make_jobboard

    metrics_server = start_metrics(conf, get_database(conf), persistence,
                                   make_jobboard(conf, persistence))
    gc_policy.for_service()
    switching.for_service(conf)
    click.echo(f"conductor {name or default_name(conf)}: {workers} worker(s) on the "
               f"{conf.jobboard.backend} jobboard '{conf.jobboard.board_name}'")
    # Wake up now and then: a signal handler runs only between bytecodes of
    # the main thread, which an unbounded wait would not reach promptly.
    while not stop.wait(0.5):
        pass
    if recovery is not None:
        recovery.stop()
    reconciler.stop()
    admitter.stop()
    if cloud_sync is not None:
        cloud_sync.stop()
    pool.stop()
    if agent is not None:
        agent.stop()
    if metrics_server is not None:
        metrics_server.shutdown()
    click.echo("conductor stopped")
