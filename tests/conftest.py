"""Fixtures shared by every test layer, and the marks each test gets from where it is.

Tests that need a real server (PostgreSQL, Redis, RabbitMQ on 127.0.0.1) ask for
its fixture. Outside CI a missing server skips them with the reason; with
FLEETFLOW_REQUIRE_SERVICES=1 (what .ci/run sets) a missing server fails them.

Every test is marked with its layer, the directory it is in (``unit``,
``functional``, ...); the layers whose every test starts servers, conductors or
a whole external suite are ``slow`` too, and so are the flow tests' runs under
TaskFlow's stock engine. The openstack tests are in two ``xdist_group`` s, so that
``--dist loadgroup`` runs each on one worker, beside one Nova harness.
``network`` tests are skipped unless FLEETFLOW_NETWORK_TESTS=1 or ``-m`` names them;
``exclusive`` tests (they restart a shared server) are skipped in a parallel run that
selects tests using those servers; CI runs them beside the openstack layer, which uses
none (README, "Development loop").
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid

import pytest

PG_ADMIN_URL = os.environ.get("FLEETFLOW_TEST_PG_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("FLEETFLOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
RABBIT_URL = os.environ.get("FLEETFLOW_TEST_RABBIT_URL",
                            "rabbit://guest:guest@127.0.0.1:5672/")

TESTS = pathlib.Path(__file__).resolve().parent
#: The layers: each is a directory of tests/ and the mark its tests get.
LAYERS = ("unit", "functional", "integration", "reliability", "conformance", "openstack",
          "console")
#: Layers whose every test is slow: real servers, killed conductors, OpenStack's suite, a real
#: Nova, a browser.
SLOW_LAYERS = {"integration", "reliability", "conformance", "openstack", "console"}
#: Layers whose tests run in xdist groups (``--dist loadgroup``): each xdist worker that
#: runs an openstack test starts a Nova harness of its own, which uses most of a core
#: while Nova works. One harness ran the whole layer on one core; the layer is in two
#: groups of about the same work, so two workers (and two harnesses) share it.
GROUPED_LAYERS = {"openstack"}
#: The modules of a grouped layer that make its second group (the others: the first).
SECOND_GROUP = {"openstack": ("test_evacuations.py", "test_recovery.py")}
#: The layer whose tests use no shared server (PostgreSQL, Redis, RabbitMQ): the
#: ``exclusive`` tests, which restart those servers, may run beside it.
SERVERLESS_LAYER = "openstack"
#: The engine parameter of the flow tests (tests/unit/flows/conftest.py): their runs
#: under TaskFlow's stock engine are slow; fleetflow's engine covers them in the fast loop.
STOCK_ENGINE_RUN = ("fleetflow_engine", "parallel")


def _switched_on(variable: str) -> bool:
    return os.environ.get(variable, "") not in ("", "0", "false")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark each test with its layer (and ``slow``) before ``-m`` selects; then, among
    the tests selected, keep the ``exclusive`` ones apart."""
    asked = config.getoption("markexpr", "") or ""
    network = _switched_on("FLEETFLOW_NETWORK_TESTS") or "network" in asked
    for item in items:
        try:
            layer = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:
            layer = None
        if layer in LAYERS:
            item.add_marker(layer)
            if layer in SLOW_LAYERS:
                item.add_marker("slow")
            if layer in GROUPED_LAYERS:
                second = item.path.name in SECOND_GROUP.get(layer, ())
                item.add_marker(pytest.mark.xdist_group(f"{layer}-2" if second else layer))
        callspec = getattr(item, "callspec", None)
        if callspec is not None \
                and callspec.params.get(STOCK_ENGINE_RUN[0]) == STOCK_ENGINE_RUN[1]:
            item.add_marker("slow")
        if not network and item.get_closest_marker("network"):
            item.add_marker(pytest.mark.skip(
                reason="needs the network: FLEETFLOW_NETWORK_TESTS=1 or -m network"))
        if item.get_closest_marker("exclusive"):
            item.add_marker(pytest.mark.xdist_group("exclusive"))
    yield
    _skip_exclusive_beside_servers(config, items)


def _skip_exclusive_beside_servers(config, items) -> None:
    """Skip the ``exclusive`` tests in a parallel run that shares their servers.

    They restart a server the other tests use; beside them run, on other workers, only
    the tests of layers that use none of the shared servers (the openstack layer: Nova's
    harness and an embedded fleetflow). Their own ``xdist_group`` keeps them one after
    the other on one worker.
    """
    # Under pytest-xdist with more than one worker other tests run beside each one.
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) <= 1:
        return
    # Only ``--dist loadgroup`` keeps the group on one worker: under any other mode two
    # restarts could run at once (pytest-xdist tells its workers as ``option.loadgroup``).
    if getattr(config.option, "loadgroup", False) and all(
            item.get_closest_marker("exclusive") or item.get_closest_marker(SERVERLESS_LAYER)
            for item in items):
        return
    for item in items:
        if item.get_closest_marker("exclusive"):
            item.add_marker(pytest.mark.skip(
                reason="restarts a shared server, so it runs apart: "
                       "pytest -n 3 --dist loadgroup -m 'exclusive or openstack'"))



def _address(url: str, default_port: int) -> tuple[str, int]:
    """Host and port the tests will connect to for ``url``."""
    parsed = urllib.parse.urlsplit(url)
    return parsed.hostname or "127.0.0.1", parsed.port or default_port


# Where each server is looked for: the same URLs the tests connect to.
SERVICES = {
    "postgresql": _address(PG_ADMIN_URL, 5432),
    "redis": _address(REDIS_URL, 6379),
    "rabbitmq": _address(RABBIT_URL, 5672),
}


def services_required() -> bool:
    return os.environ.get("FLEETFLOW_REQUIRE_SERVICES", "") not in ("", "0", "false")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def skip_or_fail(reason: str) -> None:
    """Skip the calling test, or fail it under FLEETFLOW_REQUIRE_SERVICES (what CI sets)."""
    if services_required():
        pytest.fail(reason + " and FLEETFLOW_REQUIRE_SERVICES is set", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def missing_tool():
    """``missing_tool(reason)``: :func:`skip_or_fail` for tests that restart a server."""
    return skip_or_fail


def need_service(name: str) -> None:
    """Skip (or, under CI, fail) the calling test when ``name`` is not reachable."""
    host, port = SERVICES[name]
    if _reachable(host, port):
        return
    skip_or_fail(f"{name} is not reachable on {host}:{port}")


@pytest.fixture
def make_conf(fleetflow_make_conf):
    """Build a configuration rooted in the test's own directory (fleetflow.testing's).

    ``make_conf(database={"connection": ...}, compute={"boot_seconds": 0.1})``
    """
    return fleetflow_make_conf


@pytest.fixture
def conf(make_conf):
    return make_conf()


@pytest.fixture
def db(conf):
    """An upgraded SQLite database in the test's directory (a copy of one migrated once)."""
    from fleetflow.testing.schema import upgraded_database

    database = upgraded_database(conf)
    yield database
    database.dispose()


@pytest.fixture
def pg_url():
    """A fresh, empty PostgreSQL database for this test; dropped afterwards."""
    need_service("postgresql")
    import sqlalchemy as sa

    name = "fleetflow_test_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    yield url
    with admin.connect() as c:
        c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


@pytest.fixture
def redis_url():
    """The real Redis; tests use a unique key namespace of their own."""
    need_service("redis")
    return REDIS_URL


@pytest.fixture
def rabbit_url():
    """The real RabbitMQ (tests use unique topics of their own)."""
    need_service("rabbitmq")
    return RABBIT_URL


@pytest.fixture
def assert_audit_clean():
    """``assert_audit_clean(database, placement, compute, **audit_kwargs)``.

    Call it at the end of a flow, crash or revert test, once every flow has
    settled: it runs the strict audit and fails with every mismatch listed.
    Returns the report (its ``counts`` say how much was looked at).
    """
    def _check(database, placement_client, compute_api, explain=None, **kwargs):
        from fleetflow.testing import assert_audit_clean

        try:
            return assert_audit_clean(database, placement_client, compute_api, **kwargs)
        except AssertionError as exc:
            # ``explain(message)``: what the test knows of the rows named (a
            # crash case, its conductors' logs), added to the failure.
            extra = explain(str(exc)) if explain is not None else ""
            pytest.fail(str(exc) + (f"\n{extra}" if extra else ""), pytrace=False)

    return _check


@pytest.fixture
def service_gate():
    """``need_service`` and the table it reads, for testing the gate itself."""
    return need_service, SERVICES


def pick_free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for module-wide servers)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_server(server) -> None:
    """Stop a server subprocess: SIGTERM, then SIGKILL if it has not exited in 30 s."""
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@pytest.fixture(scope="session")
def openstack_command():
    """An :class:`tests.openstack_command.OpenstackCommand`: ``.run(args, env=...)`` runs
    ``openstack ARGS`` in a process of its own, forked from one that imported the client.
    Skips when python-openstackclient is not installed."""
    from tests.openstack_command import OpenstackCommand, installed_script

    if installed_script() is None:
        pytest.skip("the openstack client is not installed "
                    "(pip install python-openstackclient osc-placement)")
    command = OpenstackCommand()
    yield command
    command.close()


@pytest.fixture
def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    return pick_free_port()


@pytest.fixture
def wait_for_api():
    """``wait_for_api(url, alive, on_timeout)``: returns once ``url`` answers HTTP.

    ``alive()`` False (the server process exited) or 120 s without an answer
    fails the test with ``on_timeout()``'s text.
    """
    import requests

    def _wait(url: str, alive=lambda: True, on_timeout=lambda: "") -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                requests.get(f"{url}/openapi.json", timeout=2)
                return
            except (requests.ConnectionError, requests.Timeout):
                # A server still starting on a loaded machine may accept and answer late.
                if not alive() or time.monotonic() > deadline:
                    pytest.fail(f"{url} never answered: {on_timeout()}", pytrace=False)
                time.sleep(0.2)

    return _wait


class TcpProxy:
    """A TCP relay from a port of its own to a real server, which a test cuts and restores.

    While it is down nothing listens on its port and every relayed connection
    is closed: to its clients the server is gone, though the server (shared by
    other tests and processes) never stopped.
    """

    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.port = pick_free_port()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def up(self) -> bool:
        return self._listener is not None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        """Stop listening and cut every relayed connection."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # stopped meanwhile
                    client.close()
                    server.close()
                    return
                self._sockets |= {client, server}
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def tcp_proxy():
    """``tcp_proxy(port)``: a started :class:`TcpProxy` to 127.0.0.1:``port``; stopped after."""
    proxies = []

    def _make(target_port: int) -> TcpProxy:
        proxy = TcpProxy(target_port)
        proxy.start()
        proxies.append(proxy)
        return proxy

    yield _make
    for proxy in proxies:
        proxy.stop()
