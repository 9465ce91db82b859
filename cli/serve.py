"""``fleetflow serve``: a whole cloud from one command.

The API and conductor threads in this process and (unless ``[compute]
simulate = false``) every host of the fleet simulated in ``[compute]
agent_processes`` child processes (0: in this one) — on SQLite by default, so
nothing else needs installing. An empty database gets its schema and a fleet
first.
"""

from __future__ import annotations

import logging
import signal
import threading

import click

from fleetflow.common import cpu_affinity, gc_policy

LOG = logging.getLogger("fleetflow.serve")


def _prepare_database(conf):
    from fleetflow.persistence import fleet
    from fleetflow.persistence.db import get_database

    database = get_database(conf)
    database.upgrade()
    with database.session() as session:
        if fleet.is_empty(session):
            expanded = fleet.expand(fleet.read(conf.fleet.file))
            fleet.load(session, expanded)
            click.echo(f"loaded fleet: {len(expanded.hosts)} hosts, "
                       f"{len(expanded.storage)} storage backends")
    return database


class Cloud:
    """Every part of an embedded cloud, started and stopped in order."""

    def __init__(self, conf):
        self.conf = conf
        self.database = None
        self.agent = None  # the in-process fleet (agent_processes = 0)
        self.agents = None  # or its child processes
        self.pool = None
        self.reconciler = None
        self.server = None
        self.compute = None  # the RPC client of the hosts, wherever they run

    def start(self):
        from werkzeug.serving import make_server

        from fleetflow.api import auth
        from fleetflow.api.app import create_app
        from fleetflow.compute import agent_processes
        from fleetflow.compute.agent import serve_fleet
        from fleetflow.engine.backend import get_backend
        from fleetflow.engine.conductor import ConductorPool
        from fleetflow.engine.evacuations import EvacuationOps
        from fleetflow.engine.hosts import HostOps
        from fleetflow.engine.jobboard import make_jobboard
        from fleetflow.engine.operations import Operations
        from fleetflow.engine.submit import Submitter
        from fleetflow.engine.vclusters import VClusterOps
        from fleetflow.flows import runtime

        conf = self.conf
        self.database = _prepare_database(conf)
        if conf.compute.simulate and conf.compute.agent_processes:
            url = agent_processes.transport_url(conf)
            conf.set_override("transport_url", url, group="messaging")
            self.agents = agent_processes.AgentProcesses(
                conf, conf.compute.agent_processes, url).start()
        elif conf.compute.simulate:
            self.agent = serve_fleet(conf, self.database)
        rt = runtime.install_from_conf(conf, self.database)
        self.compute = rt.compute
        persistence = get_backend(conf)
        board = make_jobboard(conf, persistence)
        submit = Submitter(board, persistence)
        if conf.conductor.workers:
            self.pool = ConductorPool(conf, persistence=persistence)
            self.pool.start()
        # Even without workers: the board is rebuilt from the database.
        from fleetflow.engine.reconcile import Reconciler

        self.reconciler = Reconciler(conf, persistence, self.database).start()
        hosts = HostOps(conf, self.database, getattr(rt.placement, "store", None), rt.compute)
        app = create_app(conf, self.database, services={
            "operations": Operations(conf, self.database, submit),
            "job_submitter": submit,
            "placement_store": getattr(rt.placement, "store", None),
            "compute_rpcapi": rt.compute,
            "jobboard": board,
            "logbook_backend": persistence,
            "evacuations": EvacuationOps(conf, self.database, submit, compute=rt.compute,
                                         on_host_state=hosts.sync_placement),
            "hosts": hosts,
            "vclusters": VClusterOps(conf, self.database, submit),
        })
        if auth.noauth_exposed(conf):
            click.secho("WARNING: auth_strategy = noauth while listening beyond loopback: "
                        "anyone who reaches the port can act as admin", fg="red", err=True)
        self.server = make_server(conf.api.host, conf.api.port, app, threaded=True)
        return self

    @property
    def url(self) -> str:
        return f"http://{self.conf.api.host}:{self.server.server_port}"

    def serve_forever(self):
        self.server.serve_forever()

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
        if self.reconciler is not None:
            self.reconciler.stop()
        if self.pool is not None:
            self.pool.stop()
        if self.agent is not None:
            self.agent.stop()
        if self.agents is not None:
            self.agents.stop()


@click.command("serve")
@click.pass_obj
def serve(conf) -> None:
    """Run the API, conductors and the simulated fleet until Ctrl-C."""
    logging.basicConfig(level=logging.DEBUG if conf.debug else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cloud = Cloud(conf).start()
    gc_policy.for_service()
    # After start: the agent processes are running and keep every CPU.
    cpu = cpu_affinity.pin_threads_to_one_cpu() if conf.serve_on_one_cpu else None
    click.echo(f"fleetflow serving on {cloud.url}  (Ctrl-C to stop)")
    if cpu is not None:
        LOG.info("serve process on CPU %d", cpu)
    stopping = threading.Event()

    def _stop(signum, _frame):
        if not stopping.is_set():
            stopping.set()
            # shutdown() waits for serve_forever to return: call it off the
            # thread that is running serve_forever.
            threading.Thread(target=cloud.server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        cloud.serve_forever()
    finally:
        cloud.server = None
        cloud.stop()
        click.echo("fleetflow stopped")
