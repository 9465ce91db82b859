"""``fleetflow conductor``: run conductor workers until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import threading

import click


def _setup_process(conf) -> None:
    """Per-process set-up a conductor needs before it runs flows.

    Flows whose tasks look up process-wide clients (flows/runtime.py) get
    them installed here once that module offers ``install_from_conf``.
    """
    try:
        from fleetflow.flows import runtime
    except ImportError:
        return
    install = getattr(runtime, "install_from_conf", None)
    if install is not None:
        install(conf)


@click.command("conductor")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Conductor threads in this process (each runs one flow at a time).")
@click.option("--name", default=None,
              help="Conductor name (default: [conductor] name, else host name and pid).")
@click.pass_obj
def conductor(conf, workers: int, name: str | None) -> None:
    """Claim flow jobs from the jobboard and run them until stopped.

    SIGTERM or SIGINT stops the workers: a running flow is suspended at its
    next atom boundary and its job handed back to the board for another
    conductor to resume.
    """
    from fleetflow.engine.backend import get_backend
    from fleetflow.engine.conductor import ConductorPool, default_name
    from fleetflow.persistence import migrate
    from fleetflow.persistence.db import get_database

    logging.basicConfig(level=logging.DEBUG if conf.debug else logging.INFO,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s %(message)s")
    # NOTE: many conductors may start at once; the schema has one owner
    # ('fleetflow db upgrade', or 'fleetflow serve'), conductors only check it.
    if not migrate.is_current(get_database(conf).engine):
        raise click.ClickException("the database schema is not current: run "
                                   "'fleetflow db upgrade' first")
    persistence = get_backend(conf)
    _setup_process(conf)
    stop = threading.Event()

    def _on_signal(signum, _frame):
        logging.getLogger(__name__).info("signal %s: stopping conductors", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    pool = ConductorPool(conf, workers=workers, name=name or default_name(conf),
                         persistence=persistence)
    pool.start()
    click.echo(f"conductor {name or default_name(conf)}: {workers} worker(s) on the "
               f"{conf.jobboard.backend} jobboard '{conf.jobboard.board_name}'")
    # Wake up now and then: a signal handler runs only between bytecodes of
    # the main thread, which an unbounded wait would not reach promptly.
    while not stop.wait(0.5):
        pass
    pool.stop()
    click.echo("conductor stopped")
