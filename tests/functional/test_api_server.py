"""fleetflow serve's HTTP server (api/server.py): keep-alive, a bounded pool, a clean stop."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from fleetflow.api.server import APIServer


def _app(environ, start_response):
    delay = float(environ.get("QUERY_STRING") or 0)
    if delay:
        time.sleep(delay)
    body = f"{environ['REMOTE_PORT']} {threading.get_ident()}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]


@pytest.fixture
def server():
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    api = APIServer(_app, sock, threads=2)
    runner = threading.Thread(target=api.serve_forever, daemon=True)
    runner.start()
    yield api
    api.shutdown()
    runner.join(15)


def _get(conn: http.client.HTTPConnection, path: str = "/") -> tuple[int, str]:
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, response.read().decode()


def test_a_client_keeps_its_connection_between_requests(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    answers = [_get(conn) for _ in range(5)]
    conn.close()
    assert {status for status, _ in answers} == {200}
    # One client port for all five: the same TCP connection served every request.
    assert len({body.split()[0] for _, body in answers}) == 1


def test_connections_send_without_waiting_for_acks(server):
    # Accepted connections inherit TCP_NODELAY from the listening socket.
    assert server._server.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_many_idle_connections_do_not_hold_the_threads(server):
    port = server.server_address[1]
    idle = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(6)]
    for conn in idle:
        assert _get(conn)[0] == 200  # now idle, kept alive
    # Two threads, six idle connections: a seventh client is still answered at once.
    fresh = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    assert _get(fresh)[0] == 200
    for conn in [*idle, fresh]:
        conn.close()


def test_shutdown_lets_the_request_in_flight_finish(server):
    port = server.server_address[1]
    answers = []

    def slow():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        answers.append(_get(conn, "/?1.0"))
        conn.close()

    client = threading.Thread(target=slow)
    client.start()
    time.sleep(0.3)  # the request is being served
    server.shutdown()
    client.join(20)
    assert [status for status, _ in answers] == [200]
    with pytest.raises(OSError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/")
