"""The HTTP server of ``fleetflow serve``: cheroot's thread-pool WSGI server.

werkzeug's ``make_server(threaded=True)`` is a development server: a new
thread per connection, no bound on them, and a stop that closes the
listening socket without letting requests in flight finish. cheroot (the
server of CherryPy) keeps a fixed pool of ``[api] server_threads`` threads
that take requests from every connection, parks idle keep-alive connections
in a selector instead of a thread, and on stop lets the requests in flight
finish (up to :data:`SHUTDOWN_TIMEOUT`). It was chosen over waitress by
measurement (``bench/api.py --http``, ``bench/RESULTS.md``).

A deployment under gunicorn, uwsgi or mod_wsgi loads
:mod:`fleetflow.api.wsgi` instead (``docs/deployment.md``).
"""

from __future__ import annotations

import socket
import threading

from cheroot import wsgi

# Seconds a stop waits for requests in flight before closing their connections.
SHUTDOWN_TIMEOUT = 10
# Seconds an idle keep-alive connection is kept before the server closes it.
KEEP_ALIVE_TIMEOUT = 60


class _PreboundServer(wsgi.Server):
    """cheroot's server on a socket bound beforehand (serve binds it first to
    report a busy port before anything else starts)."""

    def __init__(self, app, sock: socket.socket, threads: int, backlog: int):
        super().__init__(sock.getsockname()[:2], app, numthreads=threads,
                         shutdown_timeout=SHUTDOWN_TIMEOUT)
        # Every client may keep its connection (cheroot keeps 10 by default):
        # an idle one costs a selector entry, not a thread.
        self.keep_alive_conn_limit = None
        self.timeout = KEEP_ALIVE_TIMEOUT
        self.request_queue_size = backlog
        self._bound = sock

    def bind(self, family, type, proto=0):  # noqa: A002 - cheroot's signature
        # cheroot's prepare() calls this to create and bind its socket: hand it ours,
        # with what cheroot's own binding sets. TCP_NODELAY above all: the
        # connections inherit it, and without it a response sent in two writes
        # (headers, body) waits ~40 ms for the client's delayed ACK.
        self._bound.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.socket = self._bound
        self.bind_addr = self._bound.getsockname()[:2]
        return self.socket


class APIServer:
    """The API app served on ``sock`` (bound, listening or not) by ``threads`` threads.

    The interface of werkzeug's server that serve and its tests use: ``app``,
    ``server_address``, ``serve_forever()`` and ``shutdown()`` (from another thread). Both return
    only once the requests in flight have been answered (or
    :data:`SHUTDOWN_TIMEOUT` has passed).
    """

    def __init__(self, app, sock: socket.socket, threads: int, backlog: int = 128):
        self.app = app
        self._server = _PreboundServer(app, sock, threads, backlog)
        # Binds nothing (the socket is ours), listens and starts the threads.
        self._server.prepare()
        self.server_address = sock.getsockname()[:2]
        self._stopping = threading.Lock()
        self._stopped = False

    def serve_forever(self) -> None:
        try:
            self._server.serve()
        finally:
            # serve() returns as soon as a stop begins: wait for it to end.
            self.shutdown()

    def shutdown(self) -> None:
        with self._stopping:
            if not self._stopped:
                self._server.stop()
                self._stopped = True
