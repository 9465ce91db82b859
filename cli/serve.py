"""``fleetflow serve``: a whole cloud from one command.

The API and conductor threads in this process and (unless ``[compute]
simulate = false``) every host of the fleet simulated in ``[compute]
agent_processes`` child processes (0: in this one) — on SQLite by default, so
nothing else needs installing. An empty database gets its schema and a fleet
first.

Every file it and its agents write lives in ``[DEFAULT] state_dir``
(``fleetflow-state`` in the working directory by default): the default
SQLite database and its WAL files, the simulated hosts' guests
(``[compute] state_path``), the agents' RPC sockets (``rpc/``) and the
conductors' liveness records (``conductors/``).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import threading

import click

from fleetflow.cli.startup import check_config, register_metrics
from fleetflow.common import config, cpu_affinity, gc_policy, switching
from fleetflow.common.config import openstack_mode, simulates_hosts

LOG = logging.getLogger("fleetflow.serve")


def _prepare_database(conf):
    from fleetflow.persistence import fleet
    from fleetflow.persistence.db import get_database

    database = get_database(conf)
    database.upgrade()
    if openstack_mode(conf):
        # The cloud's own hosts, flavors and images: synced, never a fleet file.
        from fleetflow.services import sync

        counts = sync.sync(conf, database)
        click.echo(f"synced the cloud: {counts.get('hosts', 0)} hosts")
        return database
    with database.session() as session:
        if fleet.is_empty(session):
            expanded = fleet.expand(fleet.read(conf.fleet.file))
            fleet.load(session, expanded)
            click.echo(f"loaded fleet: {len(expanded.hosts)} hosts, "
                       f"{len(expanded.storage)} storage backends")
    return database


# Connections the kernel queues while every server thread is busy.
LISTEN_BACKLOG = 128


def _cannot_listen(conf, exc: OSError) -> click.ClickException:
    if exc.errno == errno.EADDRINUSE:
        reason = "the address is already in use (another fleetflow serve?)"
    else:
        reason = exc.strerror or str(exc)
    return click.ClickException(
        f"cannot listen on {conf.api.host}:{conf.api.port}: {reason}; choose another port "
        "with [api] port (FLEETFLOW_API_PORT) or another address with [api] host "
        "(FLEETFLOW_API_HOST)")


def bind_api_socket(conf) -> socket.socket:
    """The API's socket, bound (not yet listening) before anything else starts.

    A busy address is then one clear error at once, naming the options to
    change, instead of the server's own message after the fleet has started.
    It listens only once the API can answer (:func:`listen`): until then a
    client is refused at once rather than left waiting on an unread backlog.
    """
    try:
        infos = socket.getaddrinfo(conf.api.host, conf.api.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise click.ClickException(
            f"cannot listen on {conf.api.host}:{conf.api.port}: {exc.strerror}; set "
            "[api] host (FLEETFLOW_API_HOST) to an address of this machine") from exc
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        # A restart must not wait for the old connections' TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise _cannot_listen(conf, exc) from exc
    return sock


def listen(conf, sock: socket.socket) -> None:
    try:
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        raise _cannot_listen(conf, exc) from exc


class Cloud:
    """Every part of an embedded cloud, started and stopped in order.

    ``listener``: the API's socket, already bound (:func:`bind_api_socket`);
    without it ``start`` binds ``[api] host:port`` itself.
    """

    def __init__(self, conf, listener: socket.socket | None = None):
        self.conf = conf
        self.listener = listener
        self.database = None
        self.agent = None  # the in-process fleet (agent_processes = 0)
        self.agents = None  # or its child processes
        self.pool = None
        self.reconciler = None
        self.admitter = None  # the queue's admission passes
        self.cloud_sync = None  # openstack mode: the cloud mirrored into the rows
        self.recovery = None  # the recovery monitor, when [recovery] enabled
        self.server = None
        self.compute = None  # the RPC client of the hosts, wherever they run

    def start(self):
        from fleetflow.api import auth
        from fleetflow.api.app import create_app
        from fleetflow.api.server import APIServer
        from fleetflow.compute import agent_processes
        from fleetflow.compute.agent import serve_fleet
        from fleetflow.engine.backend import get_backend
        from fleetflow.engine.conductor.pool import ConductorPool
        from fleetflow.engine.jobboard.boards import make_jobboard
        from fleetflow.engine.reconcile import Reconciler
        from fleetflow.flows import runtime
        from fleetflow.services.wiring import make_services, recovery_monitor

        conf = self.conf
        os.makedirs(conf.state_dir, exist_ok=True)
        self.database = _prepare_database(conf)
        simulates = simulates_hosts(conf)
        if simulates and conf.compute.agent_processes:
            url = agent_processes.transport_url(conf)
            conf.set_override("transport_url", url, group="messaging")
            self.agents = agent_processes.AgentProcesses(
                conf, conf.compute.agent_processes, url).start()
        elif simulates:
            self.agent = serve_fleet(conf, self.database)
        rt = runtime.install_from_conf(conf, self.database)
        self.compute = rt.compute
        persistence = get_backend(conf)
        board = make_jobboard(conf, persistence)
        if conf.conductor.workers:
            from fleetflow.engine.conductor.worker import default_name
            from fleetflow.services.queue.admitter import Admitter

            self.pool = ConductorPool(conf, persistence=persistence)
            self.pool.start()
            self.admitter = Admitter.for_process(conf, self.database, board, persistence,
                                                 default_name(conf)).start()
        # Even without workers: the board is rebuilt from the database.
        self.reconciler = Reconciler(conf, persistence, self.database).start()
        if openstack_mode(conf):
            from fleetflow.services.sync import PeriodicSync

            self.cloud_sync = PeriodicSync(conf, self.database).start()
        services = make_services(conf, self.database, rt, persistence, board)
        if conf.conductor.workers:
            # It runs in every conductor process; the lease makes one act.
            self.recovery = recovery_monitor(conf, self.database, rt, services)
        app = create_app(conf, self.database, services=services)
        # /metrics is the API's; the gauges read what this process runs.
        register_metrics(conf, self.database, persistence, board)
        if auth.noauth_exposed(conf):
            click.secho("WARNING: auth_strategy = noauth while listening beyond loopback: "
                        "anyone who reaches the port can act as admin", fg="red", err=True)
        if self.listener is None:
            self.listener = bind_api_socket(conf)
        listen(conf, self.listener)
        # The server owns the socket from now on and closes it when it stops.
        self.server = APIServer(app, self.listener, conf.api.server_threads, LISTEN_BACKLOG)
        self.listener = None
        return self

    @property
    def url(self) -> str:
        return f"http://{self.conf.api.host}:{self.server.server_address[1]}"

    def serve_forever(self):
        self.server.serve_forever()

    def stop(self):
        if self.listener is not None:
            self.listener.close()
        if self.server is not None:
            self.server.shutdown()
        if self.recovery is not None:
            self.recovery.stop()
        if self.reconciler is not None:
            self.reconciler.stop()
        if self.admitter is not None:
            self.admitter.stop()
        if self.cloud_sync is not None:
            self.cloud_sync.stop()
        if self.pool is not None:
            self.pool.stop()
        if self.agent is not None:
            self.agent.stop()
        if self.agents is not None:
            self.agents.stop()


@click.command("serve")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Directory of every file serve and its agents write (default: "
                   "[DEFAULT] state_dir, FLEETFLOW_STATE_DIR, else ./fleetflow-state).")
@click.pass_obj
def serve(conf, state_dir: str | None) -> None:
    """Run the API, conductors and the simulated fleet until Ctrl-C.

    \b
    Listens on [api] host:port (FLEETFLOW_API_HOST, FLEETFLOW_API_PORT;
    127.0.0.1:8774 by default). Writes only into the state directory
    (--state-dir, [DEFAULT] state_dir, FLEETFLOW_STATE_DIR; ./fleetflow-state
    by default): the SQLite database unless [database] connection says
    otherwise, the simulated hosts' guests, the agents' RPC sockets and the
    conductors' liveness records.
    """
    check_config(conf)
    if state_dir is not None:
        config.set_state_dir(conf, state_dir)
    if conf.fleet.file is None and simulates_hosts(conf):
        # The demo fleet recovers its dead hosts by itself; a default only, so
        # [recovery] enabled in a file or FLEETFLOW_RECOVERY_ENABLED still wins.
        conf.set_default("enabled", True, group="recovery")
    logging.basicConfig(level=logging.DEBUG if conf.debug else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    listener = bind_api_socket(conf)
    try:
        cloud = Cloud(conf, listener).start()
    except BaseException:
        listener.close()
        raise
    gc_policy.for_service()
    switching.for_service(conf)
    # After start: the agent processes are running and keep every CPU.
    cpu = cpu_affinity.pin_threads_to_one_cpu() if conf.serve_on_one_cpu else None
    click.echo(f"fleetflow serving on {cloud.url}  (state in {conf.state_dir}, "
               "Ctrl-C to stop)")
    if cpu is not None:
        LOG.info("serve process on CPU %d", cpu)
    stopping = threading.Event()

    def _stop(signum, _frame):
        if not stopping.is_set():
            stopping.set()
            # shutdown() waits for the requests in flight: not in a signal
            # handler of the thread that runs serve_forever (which returns
            # once they are answered).
            threading.Thread(target=cloud.server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        cloud.serve_forever()
    finally:
        cloud.server = None
        cloud.stop()
        click.echo("fleetflow stopped")
