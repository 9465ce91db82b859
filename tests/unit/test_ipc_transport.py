"""The fleetflow-ipc oslo.messaging transport (Unix sockets, no broker).

Through oslo.messaging's public API, as the compute agent and its client use
it: calls, casts, fanout, errors crossing with their class, a server that is
late, gone, or in another process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent import futures

import oslo_messaging
import pytest

from fleetflow.compute import messaging
from fleetflow.compute.exceptions import CapacityExceeded
from fleetflow.compute.ipc_driver import MAX_PATH, socket_path

GUARD_S = 30


class ServerBug(Exception):
    """Raised on the server from a module callers may not import from."""


class Endpoint:
    def __init__(self):
        self.casts: list = []
        self.cast_seen = threading.Event()
        self.release = threading.Event()
        self.entered = threading.Event()

    def echo(self, ctxt, value):
        return value

    def note(self, ctxt, value):
        self.casts.append(value)
        self.cast_seen.set()

    def full(self, ctxt, host):
        try:  # as the agent's _remotable does
            raise CapacityExceeded(f"{host} is full", host=host)
        except CapacityExceeded as exc:
            exc.kwargs = dict(exc.details)
            raise oslo_messaging.ExpectedException() from exc

    def unanswerable(self, ctxt):
        return object()  # no JSON for this

    def broken(self, ctxt):
        raise ServerBug("a bug on the server")

    def hold(self, ctxt):
        self.entered.set()
        self.release.wait(GUARD_S)
        return "released"


@pytest.fixture
def ipc(make_conf, tmp_path):
    """``(conf, url)`` for a socket directory of the test's own."""
    conf = make_conf(messaging={"rpc_timeout": 10})
    url = f"fleetflow-ipc://{tmp_path / 'rpc'}"
    yield conf, url
    messaging.forget_transport(conf, url)


@pytest.fixture
def serve(ipc):
    """``serve(endpoint, server="s1", topic="t")`` starts an RPC server; all stop after."""
    conf, url = ipc
    servers = []

    def _serve(endpoint, server="s1", topic="t"):
        transport = messaging.get_transport(conf, url)
        rpc = oslo_messaging.get_rpc_server(transport, oslo_messaging.Target(
            topic=topic, server=server), [endpoint])
        rpc.start()
        servers.append(rpc)
        return rpc

    yield _serve
    for rpc in servers:
        rpc.stop()
        rpc.wait()


def client(ipc, timeout=10, **target):
    conf, url = ipc
    target.setdefault("topic", "t")
    return oslo_messaging.get_rpc_client(messaging.get_transport(conf, url),
                                         oslo_messaging.Target(**target), timeout=timeout)


def test_a_call_returns_the_result_and_a_cast_arrives(ipc, serve):
    endpoint = Endpoint()
    serve(endpoint)
    rpc = client(ipc, server="s1")
    for value in ({"a": [1, 2, {"b": None}]}, [1, "x"], None, "text"):
        assert rpc.call({}, "echo", value=value) == value
    rpc.cast({}, "note", value=7)
    assert endpoint.cast_seen.wait(GUARD_S) and endpoint.casts == [7]
    # A cast is answered with nothing: the next call on its connection reads its own reply.
    assert rpc.call({}, "echo", value="after") == "after"


def test_concurrent_calls_each_get_their_own_reply(ipc, serve):
    serve(Endpoint())
    rpc = client(ipc, server="s1")
    with futures.ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(lambda i: rpc.call({}, "echo", value=i), range(300)))
    assert answers == list(range(300))


def test_errors_cross_with_their_class(ipc, serve):
    serve(Endpoint())
    rpc = client(ipc, server="s1")
    with pytest.raises(CapacityExceeded) as caught:
        rpc.call({}, "full", host="h7")
    assert caught.value.details["host"] == "h7" and "h7 is full" in str(caught.value)
    # Classes outside the allowed modules arrive as RemoteError, never imported.
    with pytest.raises(oslo_messaging.RemoteError) as remote:
        rpc.call({}, "broken")
    assert remote.value.exc_type == "ServerBug"
    # A result that cannot cross is an error at the caller, not a silent timeout.
    with pytest.raises(ValueError, match="Cannot convert"):
        client(ipc, server="s1", timeout=5).call({}, "unanswerable")


def test_no_server_times_out_and_a_late_server_still_answers(ipc, serve):
    with pytest.raises(oslo_messaging.MessagingTimeout):
        client(ipc, timeout=0.3, server="nobody").call({}, "echo", value=1)
    starter = threading.Timer(0.3, serve, args=(Endpoint(),))
    starter.start()
    try:
        # Sent before the server exists: held until it serves, as a broker would.
        assert client(ipc, server="s1").call({}, "echo", value="late") == "late"
    finally:
        starter.join()


def test_a_server_gone_mid_call_fails_the_call_instead_of_hanging(ipc, serve):
    endpoint = Endpoint()
    rpc_server = serve(endpoint)
    call = futures.ThreadPoolExecutor(1).submit(
        client(ipc, server="s1", timeout=GUARD_S).call, {}, "hold")
    assert endpoint.entered.wait(GUARD_S)
    # Its connections close while the request is still running.
    listener = rpc_server.listener._poll_style_listener
    for key in list(listener._selector.get_map().values()):
        if key.data not in (None, "wake"):
            key.data.sock.close()
    started = time.monotonic()
    with pytest.raises(oslo_messaging.MessagingTimeout):
        call.result(GUARD_S)
    assert time.monotonic() - started < GUARD_S / 2
    endpoint.release.set()


def test_a_restarted_server_is_reached_again(ipc, serve):
    first = serve(Endpoint())
    rpc = client(ipc, server="s1")
    assert rpc.call({}, "echo", value=1) == 1  # leaves an idle connection to it
    first.stop()
    first.wait()
    serve(Endpoint())
    # The idle connection points at the old server: dropped, not a failed call.
    assert rpc.call({}, "echo", value=2) == 2
    rpc.cast({}, "note", value=3)
    assert rpc.call({}, "echo", value=4) == 4


def test_topic_calls_reach_a_server_and_fanout_reaches_all(ipc, serve):
    first, second = Endpoint(), Endpoint()
    serve(first, server="s1")
    serve(second, server="s2")
    assert client(ipc).call({}, "echo", value="any") == "any"
    client(ipc, fanout=True).cast({}, "note", value="all")
    assert first.cast_seen.wait(GUARD_S) and second.cast_seen.wait(GUARD_S)
    assert first.casts == ["all"] and second.casts == ["all"]


def test_a_server_in_another_process_answers(ipc, tmp_path):
    """What the transport is for: the fleet agent runs in a child of ``fleetflow serve``."""
    conf, url = ipc
    script = textwrap.dedent(f"""
        import sys, threading
        import oslo_messaging
        from fleetflow.common import config
        from fleetflow.compute import messaging
        class Endpoint:
            def pid(self, ctxt):
                import os
                return os.getpid()
        conf = config.load(args=[], environ={{}})
        transport = messaging.get_transport(conf, {url!r})
        server = oslo_messaging.get_rpc_server(transport, oslo_messaging.Target(
            topic="t", server="child"), [Endpoint()])
        server.start()
        print("serving", flush=True)
        sys.stdin.read()
        server.stop(); server.wait()
        """)
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "serving"
        pid = client(ipc, server="child").call({}, "pid")
        assert pid == child.pid and pid != os.getpid()
    finally:
        child.stdin.close()
        assert child.wait(GUARD_S) == 0


def test_long_socket_paths_are_hashed_under_the_limit(tmp_path):
    short = socket_path(str(tmp_path), "openstack", "t", "s1")
    assert short == str(tmp_path / "openstack.t.s1.sock")
    deep = str(tmp_path / ("d" * 120))
    hashed = socket_path(deep, "openstack", "topic", "server")
    assert len(hashed.encode()) <= MAX_PATH
    assert hashed == socket_path(deep, "openstack", "topic", "server")  # stable
    assert hashed != socket_path(deep, "openstack", "topic", "other")


def test_a_server_in_a_deep_directory_is_reached(make_conf, tmp_path):
    conf = make_conf()
    url = f"fleetflow-ipc://{tmp_path / ('d' * 120)}"
    rpc_server = oslo_messaging.get_rpc_server(
        messaging.get_transport(conf, url), oslo_messaging.Target(topic="t", server="s"),
        [Endpoint()])
    rpc_server.start()
    try:
        rpc = oslo_messaging.get_rpc_client(messaging.get_transport(conf, url),
                                            oslo_messaging.Target(topic="t", server="s"))
        assert rpc.call({}, "echo", value=3) == 3
    finally:
        rpc_server.stop()
        rpc_server.wait()
        messaging.forget_transport(conf, url)


def test_a_url_without_a_directory_is_refused(make_conf):
    conf = make_conf()
    with pytest.raises(oslo_messaging.InvalidTransportURL):
        messaging.get_transport(conf, "fleetflow-ipc://")
