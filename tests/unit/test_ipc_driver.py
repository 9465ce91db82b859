"""The fleetflow-ipc transport driver, through oslo.messaging's public API.

Servers and clients get transports of their own, as they would in two
processes; one test runs the server in a real child process, another kills it
in the middle of a call.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from concurrent import futures

import oslo_messaging
import pytest

from fleetflow.common import config
from fleetflow.common.exceptions import InvalidInput
from fleetflow.compute import messaging
from fleetflow.compute.agent import RPCServer, _remotable
from fleetflow.compute.exceptions import CapacityExceeded
from fleetflow.compute.ipc_driver import MAX_PATH, socket_path

# Bound on anything that should happen at once; only reached when a test fails.
WAIT_S = 10
EXCHANGE = "openstack"  # oslo.messaging's default control_exchange


class ServerBug(Exception):
    """An error from a module whose exceptions callers may not rebuild."""


class Endpoint:
    def __init__(self, name: str = "s1"):
        self.name = name
        self.casts: list = []
        self.cast_seen = threading.Event()

    def echo(self, ctxt, value, delay=0.0):
        time.sleep(delay)
        return value

    def context(self, ctxt):
        return ctxt

    def whoami(self, ctxt):
        return self.name

    def note(self, ctxt, value):
        self.casts.append(value)
        self.cast_seen.set()

    @_remotable
    def full(self, ctxt, host):
        raise CapacityExceeded(f"{host} is full", host=host, capacity=12)

    def invalid(self, ctxt):
        raise InvalidInput("no such flavor")

    def broken(self, ctxt):
        raise ServerBug("a bug on the server")

    def unanswerable(self, ctxt):
        return object()  # has no JSON form


class IPC:
    """Transports, servers and clients on one socket directory; closed after the test."""

    def __init__(self, directory):
        self.directory = str(directory)
        self.url = f"fleetflow-ipc://{self.directory}"
        self.conf = config.load(args=[], environ={})
        messaging.register_library_opts(self.conf)
        self.transports: list = []
        self.servers: list = []
        self.client_transport = self.transport()

    def transport(self):
        transport = oslo_messaging.get_rpc_transport(
            self.conf, url=self.url, allowed_remote_exmods=messaging.ALLOWED_REMOTE_EXMODS)
        self.transports.append(transport)
        return transport

    def serve(self, endpoint, server="s1", topic="t"):
        rpc = oslo_messaging.get_rpc_server(
            self.transport(), oslo_messaging.Target(topic=topic, server=server), [endpoint],
            server_cls=RPCServer)  # the compute agent's server class
        rpc.start()
        self.servers.append(rpc)
        return rpc

    def client(self, timeout=WAIT_S, **target):
        target.setdefault("topic", "t")
        return oslo_messaging.get_rpc_client(self.client_transport,
                                             oslo_messaging.Target(**target), timeout=timeout)

    def close(self):
        for rpc in self.servers:
            rpc.stop()
        for rpc in self.servers:
            rpc.wait()
        for transport in self.transports:
            transport.cleanup()


@pytest.fixture
def ipc(tmp_path):
    ipc = IPC(tmp_path)
    yield ipc
    ipc.close()


def test_calls_return_results_and_casts_arrive(ipc):
    endpoint = Endpoint()
    ipc.serve(endpoint)
    rpc = ipc.client(server="s1")
    for value in ({"a": [1, 2, {"b": None}], "c": "d"}, [1, "x", [2.5]], None, "text", 0):
        assert rpc.call({}, "echo", value=value) == value
    assert rpc.call({"request_id": "req-1"}, "context") == {"request_id": "req-1"}
    rpc.cast({}, "note", value=7)
    assert endpoint.cast_seen.wait(WAIT_S)
    assert endpoint.casts == [7]
    # A cast has no reply: the next call on the same connection reads its own.
    for value in range(5):
        assert rpc.call({}, "echo", value=value) == value


def test_allowed_errors_keep_their_class_and_others_become_remote_errors(ipc):
    ipc.serve(Endpoint())
    rpc = ipc.client(server="s1")
    with pytest.raises(CapacityExceeded) as full:
        rpc.call({}, "full", host="h7")
    assert full.value.details == {"host": "h7", "capacity": 12}
    assert "h7 is full" in str(full.value)
    with pytest.raises(InvalidInput, match="no such flavor"):
        rpc.call({}, "invalid")
    with pytest.raises(oslo_messaging.RemoteError) as remote:
        rpc.call({}, "broken")
    assert remote.value.exc_type == "ServerBug"
    assert "a bug on the server" in remote.value.value
    # A result that cannot cross is an error at the caller, not a silent timeout.
    with pytest.raises(ValueError):
        ipc.client(server="s1", timeout=2).call({}, "unanswerable")
    assert rpc.call({}, "echo", value="still serving") == "still serving"


def test_a_call_to_no_server_times_out(ipc):
    started = time.monotonic()
    with pytest.raises(oslo_messaging.MessagingTimeout):
        ipc.client(server="nobody", timeout=0.3).call({}, "echo", value=1)
    assert time.monotonic() - started < WAIT_S / 2


def test_a_reply_later_than_the_timeout_fails_the_call_and_reaches_nobody(ipc):
    ipc.serve(Endpoint())
    rpc = ipc.client(server="s1", timeout=0.3)
    started = time.monotonic()
    with pytest.raises(oslo_messaging.MessagingTimeout):
        rpc.call({}, "echo", value="late", delay=1.0)
    assert time.monotonic() - started < 0.3 + WAIT_S / 2
    # The next call gets its own answer, not the late one.
    assert ipc.client(server="s1").call({}, "echo", value="next") == "next"
    time.sleep(1.0)
    assert ipc.client(server="s1").call({}, "echo", value="after") == "after"


def test_a_reply_larger_than_one_read_arrives_whole(ipc):
    ipc.serve(Endpoint())
    value = "x" * (4 * 1024 * 1024 + 17)  # more than a socket buffer holds
    assert ipc.client(server="s1").call({}, "echo", value=value) == value


def test_a_call_made_before_the_server_starts_is_answered(ipc):
    starter = threading.Timer(0.2, ipc.serve, args=(Endpoint(),))
    starter.start()
    try:
        assert not os.path.exists(socket_path(ipc.directory, EXCHANGE, "t", "s1"))
        assert ipc.client(server="s1", timeout=5).call({}, "echo", value="late") == "late"
    finally:
        starter.join()


def test_a_restarted_server_is_reached_again(ipc):
    first = ipc.serve(Endpoint())
    rpc = ipc.client(server="s1", timeout=2)
    assert rpc.call({}, "echo", value=1) == 1  # leaves an idle pooled connection
    first.stop()
    first.wait()
    ipc.serve(Endpoint("again"), server="s1")
    # The pooled connection led to the old server: dropped, not a failed call.
    assert rpc.call({}, "whoami") == "again"


CHILD = textwrap.dedent("""
    import os, sys, threading
    import oslo_messaging
    from fleetflow.common import config
    from fleetflow.compute import messaging
    from fleetflow.compute.agent import RPCServer

    class Endpoint:
        def pid(self, ctxt):
            return os.getpid()

        def echo(self, ctxt, value):
            return value

        def hold(self, ctxt):
            print("entered", flush=True)
            threading.Event().wait()

    conf = config.load(args=[], environ={})
    transport = messaging.get_transport(conf, sys.argv[1])
    server = oslo_messaging.get_rpc_server(
        transport, oslo_messaging.Target(topic="t", server="child"), [Endpoint()],
        server_cls=RPCServer)
    server.start()
    print("serving", flush=True)
    sys.stdin.read()  # until the parent closes stdin
    server.stop()
    server.wait()
    transport.cleanup()
    """)


@pytest.fixture
def child(ipc):
    """A server of ``Target(topic="t", server="child")`` in a process of its own."""
    process = subprocess.Popen([sys.executable, "-c", CHILD, ipc.url], bufsize=0,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert read_line(process) == "serving"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(WAIT_S)
        process.stdin.close()
        process.stdout.close()


def read_line(process) -> str:
    ready, _, _ = select.select([process.stdout], [], [], WAIT_S)
    assert ready, "the child process said nothing"
    return process.stdout.readline().decode().strip()


def test_a_server_in_another_process_answers(ipc, child):
    rpc = ipc.client(server="child")
    pid = rpc.call({}, "pid")
    assert pid == child.pid != os.getpid()
    assert rpc.call({}, "echo", value={"k": [1, None]}) == {"k": [1, None]}
    child.stdin.close()
    assert child.wait(WAIT_S) == 0
    # A server that stopped cleanly removes its socket.
    assert not os.path.exists(socket_path(ipc.directory, EXCHANGE, "t", "child"))


def test_a_server_killed_mid_call_fails_the_call_instead_of_hanging(ipc, child):
    pool = futures.ThreadPoolExecutor(1)
    try:
        call = pool.submit(ipc.client(server="child", timeout=3 * WAIT_S).call, {}, "hold")
        assert read_line(child) == "entered"
        os.kill(child.pid, signal.SIGKILL)
        # Well before the call's own timeout: the lost connection ends it.
        with pytest.raises(oslo_messaging.MessagingTimeout):
            call.result(WAIT_S)
    finally:
        pool.shutdown(wait=False)


def test_concurrent_calls_each_get_their_own_reply(ipc):
    ipc.serve(Endpoint())
    rpc = ipc.client(server="s1")

    def one(i):
        # Varied delays make replies finish out of the order they were asked in.
        return rpc.call({}, "echo", value={"i": i, "pad": "x" * i}, delay=(i * 7 % 10) / 1000)

    with futures.ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(one, range(200)))
    assert answers == [{"i": i, "pad": "x" * i} for i in range(200)]


def test_topic_calls_reach_a_server_and_fanout_reaches_every_server(ipc):
    first, second, elsewhere = Endpoint("s1"), Endpoint("s2"), Endpoint("other")
    ipc.serve(first, server="s1")
    ipc.serve(second, server="s2")
    ipc.serve(elsewhere, server="s3", topic="u")
    for _ in range(4):
        assert ipc.client().call({}, "whoami") in {"s1", "s2"}
    ipc.client(fanout=True).cast({}, "note", value="all")
    assert first.cast_seen.wait(WAIT_S) and second.cast_seen.wait(WAIT_S)
    assert first.casts == ["all"] and second.casts == ["all"]
    assert ipc.client(topic="u").call({}, "whoami") == "other"
    assert elsewhere.casts == []


def test_long_socket_paths_are_hashed_to_a_short_stable_name(tmp_path):
    assert socket_path("/srv/ff", EXCHANGE, "t", "s1") == "/srv/ff/openstack.t/s1.sock"
    deep = str(tmp_path / ("d" * 120))
    hashed = socket_path(deep, EXCHANGE, "t", "s1")
    assert len(hashed.encode()) <= MAX_PATH
    assert hashed == socket_path(deep, EXCHANGE, "t", "s1")
    others = {socket_path(deep, EXCHANGE, "t", "s2"), socket_path(deep, EXCHANGE, "u", "s1"),
              socket_path(deep + "x", EXCHANGE, "t", "s1")}
    assert hashed not in others and len(others) == 3


@pytest.fixture
def deep_ipc(tmp_path):
    ipc = IPC(tmp_path / ("d" * 120))
    yield ipc
    ipc.close()


def test_a_server_in_a_deep_directory_is_reached_by_name(deep_ipc):
    deep_ipc.serve(Endpoint())
    assert deep_ipc.client(server="s1").call({}, "echo", value=3) == 3


def test_topic_calls_reach_a_server_in_a_deep_directory(deep_ipc):
    deep_ipc.serve(Endpoint())
    assert deep_ipc.client(timeout=0.5).call({}, "whoami") == "s1"


def test_topic_calls_do_not_reach_a_topic_that_extends_the_name(ipc):
    ipc.serve(Endpoint("t"), server="s1", topic="t")
    ipc.serve(Endpoint("t.x"), server="s2", topic="t.x")
    assert [ipc.client().call({}, "whoami") for _ in range(2)] == ["t", "t"]


def test_topic_calls_skip_the_socket_left_by_a_dead_server(ipc):
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = socket_path(ipc.directory, EXCHANGE, "t", "dead")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    left.bind(path)  # as SIGKILL leaves it
    left.close()
    ipc.serve(Endpoint("live"), server="live")
    assert [ipc.client(timeout=0.3).call({}, "whoami") for _ in range(2)] == ["live"] * 2


@pytest.mark.parametrize("url", ["fleetflow-ipc://", "fleetflow-ipc:///"])
def test_a_url_without_a_directory_is_refused(url):
    conf = config.load(args=[], environ={})
    messaging.register_library_opts(conf)
    with pytest.raises(oslo_messaging.InvalidTransportURL):
        oslo_messaging.get_rpc_transport(conf, url=url)


def test_the_socket_directory_is_created(tmp_path):
    directory = tmp_path / "rpc" / "sockets"
    ipc = IPC(directory)
    try:
        assert directory.is_dir()
    finally:
        ipc.close()
