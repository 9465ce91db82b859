"""The compute agent: an oslo.messaging RPC server in front of the fake driver.

Every method takes the host name, so one RPC server serves any number of hosts:

- per-host mode (``fleetflow compute-agent --hosts h1,h2``): one server per
  host, ``Target(topic, server=<host name>)``; ``hosts.compute_agent`` is set to
  NULL (route = the host's own name);
- fleet mode (``--all``, and the embedded mode of ``fleetflow serve``): ONE
  server named after the agent serves every host; its name is written into
  ``hosts.compute_agent`` so clients route there. 10,000 hosts cost one
  listener, not 10,000.

oslo.messaging acknowledges a request before running it (at-most-once), so a
caller that timed out must ask the host (``get_instance``, ``get_move``) before
retrying.

With a database the agent also reports its living hosts' heartbeat every
``[compute] heartbeat_interval``, and a host that comes back (agent start, or
``set_faults(dead=False)``) destroys the copies the database says were
rebuilt elsewhere while it was dead.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
from collections.abc import Iterable

import oslo_messaging
from oslo_messaging.rpc import server as rpc_server

from fleetflow.common.exceptions import FleetflowError
from fleetflow.compute import build_batches, destroy_batches, messaging
from fleetflow.compute.agent_setup import (
    destroy_all_evacuated_copies,
    destroy_evacuated_copies,
    in_shard,
    load_inventories,
    load_storage,
    write_routes,
)
from fleetflow.compute.drivers.fake import FakeDriver
from fleetflow.compute.rpc_pool import PrestartedPool
from fleetflow.persistence import evacuations

LOG = logging.getLogger(__name__)

# RPC worker threads for calls that are not builds (oslo.messaging's default pool).
OTHER_CALL_THREADS = 64
# How long stop() waits for a heartbeat being written.
HEARTBEAT_STOP_S = 10.0


def rpc_pool_size(conf, hosts: int) -> int:
    """Worker threads of an RPC server serving ``hosts`` hosts.

    ``[compute] agent_threads`` when the operator set it. Otherwise one per
    build slot (``max_concurrent_builds`` per host): a build holds its thread
    for its whole boot, so with fewer threads a reservation that fits the
    hosts' slots would still boot in waves. Plus ``OTHER_CALL_THREADS`` for
    look-ups, destroys and builds waiting for a slot, at most
    ``[compute] max_agent_threads``. The agent's batched builds run on a pool of
    this size for all its hosts, its build slots' threads started up front.
    """
    if conf.compute.agent_threads is not None:
        return conf.compute.agent_threads
    slots = hosts * conf.compute.max_concurrent_builds
    return min(conf.compute.max_agent_threads, slots + OTHER_CALL_THREADS)


class RPCServer(rpc_server.RPCServer):
    """oslo.messaging's RPC server on a pool whose threads exist before the first request.

    oslo.messaging's threading executor is futurist's ThreadPoolExecutor,
    which starts a thread inside ``submit`` for every request until the pool
    is full, idle workers or not, on the one thread that polls for requests
    (see :mod:`fleetflow.compute.rpc_pool`). The server creates its pool from
    ``_executor_cls`` when it starts; ``prestart`` of its threads start with it.
    """

    prestart: int | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.executor_type == "threading":
            self._executor_cls = self._make_pool

    def _make_pool(self, max_workers: int) -> PrestartedPool:
        return PrestartedPool(max_workers, prestart=self.prestart)


def _remotable(method):
    """Let fleetflow errors cross the wire with their class and details.

    oslo.messaging rebuilds a remote exception as ``cls(*args, **kwargs)`` from
    the exception's ``kwargs`` attribute; FleetflowError keeps them as
    ``details``. They are expected outcomes (stale fence, no capacity, injected
    faults), so the server logs them at DEBUG instead of with a traceback.
    """
    @functools.wraps(method)
    def wrapper(self, ctxt, **kwargs):
        try:
            return method(self, ctxt, **kwargs)
        except FleetflowError as exc:
            exc.kwargs = dict(exc.details)
            raise oslo_messaging.ExpectedException() from exc
    return wrapper


class ComputeEndpoint:
    """RPC methods of the compute hosts (API version 1.2)."""

    target = oslo_messaging.Target(version=messaging.AGENT_API_VERSION)

    def __init__(self, driver: FakeDriver, agent_name: str, database=None,
                 builds: build_batches.BuildRunner | None = None):
        self.driver = driver
        self.agent_name = agent_name
        self.database = database
        self.builds = builds

    @_remotable
    def build_instance(self, ctxt, host, uuid, resources, image=None, fence=None):
        return self.driver.build_instance(host, uuid, resources, image=image, fence=fence)

    def build_instances(self, ctxt, builds, answer_within):
        """Many ``build_instance`` at once; one answer each (``build_batches``)."""
        return self.builds.run(builds, answer_within)

    @_remotable
    def destroy_instance(self, ctxt, host, uuid, fence=None):
        return self.driver.destroy_instance(host, uuid, fence=fence)

    def destroy_instances(self, ctxt, destroys):
        """Many ``destroy_instance`` at once; one answer each (``destroy_batches``)."""
        return destroy_batches.run(self.driver, destroys)

    @_remotable
    def attach_volume(self, ctxt, host, uuid, volume_id, fence=None):
        return self.driver.attach_volume(host, uuid, volume_id, fence=fence)

    @_remotable
    def detach_volume(self, ctxt, host, uuid, volume_id, fence=None):
        return self.driver.detach_volume(host, uuid, volume_id, fence=fence)

    @_remotable
    def start_move(self, ctxt, host, migration_id, kind, uuid, source_host, resources,
                   image=None, fence=None):
        return self.driver.start_move(host, migration_id, kind, uuid, source_host, resources,
                                      image=image, fence=fence)

    @_remotable
    def get_move(self, ctxt, host, migration_id):
        return self.driver.get_move(host, migration_id)

    @_remotable
    def confirm_move(self, ctxt, host, migration_id, fence=None):
        return self.driver.confirm_move(host, migration_id, fence=fence)

    @_remotable
    def revert_move(self, ctxt, host, migration_id, fence=None):
        return self.driver.revert_move(host, migration_id, fence=fence)

    @_remotable
    def list_instances(self, ctxt, host):
        return self.driver.list_instances(host)

    @_remotable
    def get_instance(self, ctxt, host, uuid):
        return self.driver.get_instance(host, uuid)

    @_remotable
    def ping(self, ctxt, host):
        return dict(self.driver.ping(host), agent=self.agent_name)

    @_remotable
    def set_faults(self, ctxt, host, **faults):
        result = self.driver.set_faults(host, **faults)
        if faults.get("dead") is False and self.database is not None:
            result["destroyed_copies"] = destroy_evacuated_copies(self.database, self.driver,
                                                                  host)
        return result

    @_remotable
    def set_server_faults(self, ctxt, host, uuid, fail_move=None, live_migratable=None):
        # ``host`` only routes the call: a server's faults hold on every host.
        return self.driver.set_server_faults(uuid, fail_move=fail_move,
                                             live_migratable=live_migratable)

    # A backend has no agent of its own: storage calls come through a host
    # that reaches it, and the driver refuses them from one that does not.

    @_remotable
    def create_volume(self, ctxt, host, backend, volume_id, size_gb, volume_type=None,
                      fence=None):
        return self.driver.create_volume(backend, volume_id, size_gb, volume_type=volume_type,
                                         fence=fence, host=host)

    @_remotable
    def delete_volume(self, ctxt, host, backend, volume_id, fence=None):
        return self.driver.delete_volume(backend, volume_id, fence=fence, host=host)

    @_remotable
    def force_detach_volume(self, ctxt, host, backend, volume_id, fence=None):
        return self.driver.force_detach_volume(backend, volume_id, fence=fence, host=host)

    @_remotable
    def list_volumes(self, ctxt, host, backend, include_deleted=False):
        return self.driver.list_volumes(backend, include_deleted=include_deleted, host=host)


def default_server_name() -> str:
    """The fleet-mode server name: stable across restarts of this machine's agent,
    so requests queued while it was down (RabbitMQ) still reach it."""
    return f"{socket.gethostname()}-compute"


class ComputeAgent:
    """RPC servers plus the driver behind them; ``stop()`` ends both."""

    def __init__(self, conf, driver: FakeDriver, server_names: Iterable[str],
                 agent_name: str, transport_url: str | None = None, database=None):
        self.conf = conf
        self.driver = driver
        self.agent_name = agent_name
        self.server_names = list(server_names)
        self.database = database
        self.transport = messaging.get_transport(conf, transport_url)
        self.endpoint = ComputeEndpoint(driver, agent_name, database)
        self.servers: list = []
        self._build_pool: PrestartedPool | None = None
        self._stopped = False
        self._stop_beating = threading.Event()
        self._heart: threading.Thread | None = None

    def start(self) -> ComputeAgent:
        # One server for every host (fleet mode) or one per host (per-host mode).
        hosts_per_server = -(-len(self.driver.hosts) // max(1, len(self.server_names)))
        pool_size = rpc_pool_size(self.conf, max(1, hosts_per_server))
        server_slots = max(1, hosts_per_server) * self.conf.compute.max_concurrent_builds
        self._start_build_pool()
        for name in self.server_names:
            target = oslo_messaging.Target(topic=self.conf.messaging.topic, server=name)
            server = oslo_messaging.get_rpc_server(self.transport, target, [self.endpoint],
                                                   server_cls=RPCServer)
            # Builds sent one a call (a client with batches off) find a thread per
            # slot ready, up to OTHER_CALL_THREADS; more start as they come.
            server.prestart = min(server_slots, OTHER_CALL_THREADS)
            # NOTE: builds block their thread for the boot latency, and calls
            # to a dead host hang; the default pool of 64 threads would make
            # one slow host stall every other host of a fleet agent.
            server.start(override_pool_size=pool_size)
            self.servers.append(server)
        LOG.info("compute agent %s serving %d hosts on %d RPC servers of up to %d "
                 "threads (topic %s)", self.agent_name, len(self.driver.hosts),
                 len(self.servers), pool_size, self.conf.messaging.topic)
        if self.database is not None:
            self._heart = threading.Thread(target=self._beat, daemon=True,
                                           name=f"{self.agent_name}-heartbeat")
            self._heart.start()
        return self

    def _start_build_pool(self) -> None:
        """The threads batched builds of every served host run on (``build_batches``),
        one per build slot ready before the first burst."""
        threads = rpc_pool_size(self.conf, max(1, len(self.driver.hosts)))
        slots = len(self.driver.hosts) * self.conf.compute.max_concurrent_builds
        self._build_pool = PrestartedPool(threads, prestart=min(slots, threads),
                                          thread_name_prefix="builds")
        self.endpoint.builds = build_batches.BuildRunner(
            self.driver.build_instance, self._build_pool, at_once=self.driver.build_at_once)

    def _beat(self) -> None:
        while True:
            self.heartbeat()
            if self._stop_beating.wait(self.conf.compute.heartbeat_interval):
                return

    def heartbeat(self) -> list[str]:
        """Report the served hosts that are not dead as alive now; returns them.

        A failure is logged and the next beat tries again: a database that
        is away for a while must not take the hosts' agent down with it.
        """
        try:
            hosts = sorted(set(self.driver.hosts) - self.driver.dead_hosts())
            with self.database.session() as session:
                evacuations.heartbeat(session, hosts)
            return hosts
        except Exception:  # noqa: BLE001 - see the docstring
            LOG.exception("compute agent %s: heartbeat failed", self.agent_name)
            return []

    def stop(self) -> None:
        """Stop every server (in parallel: each stop waits for its poll to end)."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_beating.set()
        if self._heart is not None:
            self._heart.join(HEARTBEAT_STOP_S)
        # Wake calls hanging on dead hosts and sleeping boots first, so the
        # servers' worker threads can finish; close the state file after them.
        self.driver.interrupt()
        stoppers = [threading.Thread(target=_stop_server, args=(s,), daemon=True)
                    for s in self.servers]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        if self._build_pool is not None:
            self._build_pool.shutdown()
        self.driver.close()


def _stop_server(server) -> None:
    server.stop()
    server.wait()


def serve(conf, database, hosts: Iterable[str] | None = None, per_host: bool = False,
          server_name: str | None = None, transport_url: str | None = None,
          shard: tuple[int, int] | None = None) -> ComputeAgent:
    """Start serving ``hosts`` (all of the database's when None); returns the agent.

    ``per_host``: one RPC server per host, addressed by the host's name;
    otherwise one server named ``server_name`` serves them all. ``shard``
    ``(index, count)``: only the hosts of that shard, so ``count`` agents
    started with the indexes 0 .. count-1 serve every host exactly once.
    """
    inventories = load_inventories(database, hosts)
    if shard is not None:
        inventories = {h: inv for h, inv in inventories.items() if in_shard(h, shard)}
    driver = FakeDriver.from_conf(conf)
    driver.add_hosts(inventories)
    names = list(inventories)
    try:
        # Only the backends these hosts reach: storage calls come through them.
        topology, backends = load_storage(database, names)
        driver.add_host_topology(topology)
        driver.add_backends(backends)
        # A host rebuilt elsewhere while it was dead (and this agent away) must
        # not run those copies: destroy them before serving. Dead hosts keep
        # theirs until they come back.
        destroy_all_evacuated_copies(database, driver)
    except Exception:
        driver.close()
        raise
    server_name = server_name or default_server_name()
    route = None if per_host else server_name
    write_routes(database, names, route)
    agent = ComputeAgent(conf, driver, names if per_host else [server_name],
                         agent_name=server_name, transport_url=transport_url,
                         database=database)
    try:
        return agent.start()
    except Exception:
        agent.stop()
        raise


def serve_fleet(conf, database, hosts: Iterable[str] | None = None) -> ComputeAgent:
    """Embedded mode: every host (or ``hosts``) served in-process by one RPC server."""
    return serve(conf, database, hosts=hosts, per_host=False)
