"""An oslo.messaging transport over Unix sockets, for agents on the same machine.

``fleetflow serve`` runs the simulated hosts in a process of their own, so they
work on the machine's second core instead of queueing for the serve process's
interpreter lock behind the engine. ``fake:`` cannot cross a process and
RabbitMQ is not installed in the embedded mode; this transport needs nothing.

URL: ``fleetflow-ipc:///<directory>``. Point to point, no broker:

- an RPC server binds one socket per target, ``<exchange>.<topic>/<server>.sock``
  in that directory; a call without a server goes to a live server of the
  topic (in turn; a socket left by a server that died is passed over), a
  fanout cast to every server listening at the time;
- a call borrows a connection to its server from a pool, writes one request
  and reads the reply on that connection, so the thread that waits is the one
  the reply wakes (no reader thread to hand over to);
- a server that is not there yet is waited for until the call's timeout (as a
  broker would hold the message); a connection lost before the reply raises
  MessagingTimeout: the server may or may not have run the request, exactly
  the at-most-once contract of the other drivers.

Frames are a 4-byte length and a JSON document; errors cross as oslo.messaging's
serialized remote exceptions, so the caller gets the same classes back.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import hashlib
import os
import queue
import selectors
import socket
import struct
import sys
import tempfile
import threading
import time

import oslo_messaging
from oslo_messaging._drivers import base
from oslo_messaging._drivers import common as rpc_common
from oslo_serialization import jsonutils

HEADER = struct.Struct("!I")
# Unix socket paths are limited to 108 bytes (sun_path). A topic's directory
# longer than TOPIC_DIR_MAX is replaced by a hash of it in the temporary
# directory, and a server name too long for what is left by a hash of it.
MAX_PATH = 100
TOPIC_DIR_MAX = 68
CONNECT_RETRY_S = 0.05
RECV_BYTES = 1 << 16


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:24]


def topic_directory(directory: str, exchange: str, topic: str) -> str:
    """Where the servers of one topic keep their sockets: one file per server."""
    path = os.path.join(directory, f"{exchange}.{topic}")
    if len(path.encode()) <= TOPIC_DIR_MAX:
        return path
    return os.path.join(tempfile.gettempdir(), f"fleetflow-ipc-{_digest(path)}")


def socket_path(directory: str, exchange: str, topic: str, server: str) -> str:
    folder = topic_directory(directory, exchange, topic)
    path = os.path.join(folder, f"{server}.sock")
    if len(path.encode()) <= MAX_PATH:
        return path
    return os.path.join(folder, f"{_digest(server)}.sock")


def encode(obj) -> bytes:
    body = jsonutils.dump_as_bytes(obj)
    return HEADER.pack(len(body)) + body


def read_frame(sock: socket.socket):
    """One frame from a blocking socket; None when the peer closed it."""
    header = _read_exactly(sock, HEADER.size)
    if header is None:
        return None
    body = _read_exactly(sock, HEADER.unpack(header)[0])
    if body is None:
        return None
    return jsonutils.loads(body)


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class _Pool:
    """Idle connections to one server socket."""

    def __init__(self, path: str):
        self.path = path
        self.idle: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()

    def connect(self, deadline: float) -> socket.socket:
        """A new connection, waiting for the server to appear until ``deadline``."""
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
                return sock
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(CONNECT_RETRY_S)

    def send(self, frame: bytes, deadline: float) -> socket.socket:
        """Write ``frame`` on an idle connection, or a new one; returns the connection.

        An idle connection whose server has gone (restarted) fails the write
        before anything was delivered: it is dropped and the next one tried.
        """
        while True:
            try:
                sock = self.idle.get_nowait()
            except queue.Empty:
                break
            try:
                sock.sendall(frame)
                return sock
            except OSError:
                sock.close()
        sock = self.connect(deadline)
        try:
            sock.sendall(frame)
        except OSError:
            sock.close()
            raise
        return sock


class IPCDriver(base.BaseDriver):
    """The client half (``send``) and the server half (``listen``) of the transport."""

    def __init__(self, conf, url, default_exchange=None, allowed_remote_exmods=None):
        super().__init__(conf, url, default_exchange, allowed_remote_exmods)
        self.directory = "/" + url.virtual_host.lstrip("/") if url.virtual_host else None
        if not self.directory:
            raise oslo_messaging.InvalidTransportURL(
                str(url), "fleetflow-ipc:///<directory> needs the sockets' directory")
        os.makedirs(self.directory, exist_ok=True)
        self._pools: dict[str, _Pool] = {}
        self._lock = threading.Lock()
        self._round_robin = 0

    def require_features(self, requeue=False):
        if requeue:
            raise NotImplementedError("fleetflow-ipc cannot requeue messages")

    # -- client ------------------------------------------------------------

    def _pool(self, path: str) -> _Pool:
        with self._lock:
            pool = self._pools.get(path)
            if pool is None:
                pool = self._pools[path] = _Pool(path)
            return pool

    def _servers_of(self, target) -> list[str]:
        """The sockets of the topic's servers (some may be left by servers that died)."""
        exchange = target.exchange or self._default_exchange
        folder = topic_directory(self.directory, exchange, target.topic)
        return sorted(glob.glob(os.path.join(glob.escape(folder), "*.sock")))

    def _deliver(self, target, frame: bytes, deadline: float) -> tuple[_Pool, socket.socket]:
        """Write ``frame`` to the target's server, or to a live server of its topic.

        A named server that is not there yet is waited for; without a name,
        the topic's servers are tried in turn, and a socket a dead server left
        behind (connection refused) is passed over.
        """
        if target.server:
            exchange = target.exchange or self._default_exchange
            pool = self._pool(socket_path(self.directory, exchange, target.topic,
                                          target.server))
            return pool, pool.send(frame, deadline)
        while True:
            found = self._servers_of(target)
            with self._lock:
                self._round_robin += 1
                start = self._round_robin
            for i in range(len(found)):
                pool = self._pool(found[(start + i) % len(found)])
                try:
                    return pool, pool.send(frame, time.monotonic())
                except OSError:
                    continue
            if time.monotonic() >= deadline:
                raise ConnectionRefusedError(f"no live server of topic {target.topic}")
            time.sleep(CONNECT_RETRY_S)

    def send(self, target, ctxt, message, wait_for_reply=None, timeout=None,
             call_monitor_timeout=None, retry=None, transport_options=None):
        timeout = timeout or self.conf.rpc_response_timeout
        deadline = time.monotonic() + timeout
        frame = encode({"ctxt": ctxt, "message": message, "reply": bool(wait_for_reply)})
        if target.fanout:
            # As a broker's fanout: to every server listening now, none waited for.
            for path in self._servers_of(target):
                pool = self._pool(path)
                with contextlib.suppress(OSError):
                    pool.idle.put(pool.send(frame, time.monotonic()))
            return None
        try:
            pool, sock = self._deliver(target, frame, deadline)
        except OSError as exc:
            if wait_for_reply:
                raise oslo_messaging.MessagingTimeout(
                    f"no server of topic {target.topic} within {timeout}s ({exc})") from exc
            raise oslo_messaging.MessageDeliveryFailure(f"{target}: {exc}") from exc
        if not wait_for_reply:
            pool.idle.put(sock)
            return None
        return self._reply(pool, sock, deadline)

    def _reply(self, pool: _Pool, sock: socket.socket, deadline: float):
        """The reply to the request just written on ``sock``, a connection of ``pool``."""
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            answer = read_frame(sock)
        except (OSError, ValueError) as exc:
            # A late reply must not reach the next caller of this connection.
            sock.close()
            raise oslo_messaging.MessagingTimeout(f"no reply from {pool.path}: {exc}") from exc
        if answer is None:
            sock.close()
            raise oslo_messaging.MessagingTimeout(
                f"{pool.path} closed the connection before replying")
        sock.settimeout(None)
        pool.idle.put(sock)
        if answer.get("failure"):
            raise rpc_common.deserialize_remote_exception(answer["failure"],
                                                          self._allowed_remote_exmods)
        return answer.get("result")

    def send_notification(self, target, ctxt, message, version, retry=None):
        raise NotImplementedError("fleetflow-ipc carries RPC only, not notifications")

    # -- server ------------------------------------------------------------

    def listen(self, target, batch_size, batch_timeout):
        exchange = target.exchange or self._default_exchange
        path = socket_path(self.directory, exchange, target.topic, target.server)
        return base.PollStyleListenerAdapter(_Listener(path), batch_size, batch_timeout)

    def listen_for_notifications(self, targets_and_priorities, pool, batch_size,
                                 batch_timeout):
        raise NotImplementedError("fleetflow-ipc carries RPC only, not notifications")

    def cleanup(self):
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            with contextlib.suppress(queue.Empty):
                while True:
                    pool.idle.get_nowait().close()


class _Incoming(base.RpcIncomingMessage):
    def __init__(self, ctxt, message, connection, wants_reply: bool):
        super().__init__(ctxt, message)
        self._connection = connection
        self._wants_reply = wants_reply

    def reply(self, reply=None, failure=None):
        if not self._wants_reply:
            return
        try:
            if failure:
                frame = encode({"result": None,
                                "failure": rpc_common.serialize_remote_exception(failure)})
            else:
                frame = encode({"result": reply, "failure": None})
        except Exception:  # noqa: BLE001 - the caller must hear of it, not time out
            frame = encode({"result": None,
                            "failure": rpc_common.serialize_remote_exception(sys.exc_info())})
        self._connection.send(frame)

    def acknowledge(self):
        pass

    def requeue(self):
        pass

    def heartbeat(self):
        pass


class _ServerConnection:
    """One client connection: frames read in the poll thread, replies sent by workers."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = bytearray()
        self._send_lock = threading.Lock()

    def frames(self):
        while len(self.buffer) >= HEADER.size:
            size = HEADER.unpack_from(self.buffer)[0]
            end = HEADER.size + size
            if len(self.buffer) < end:
                return
            body = bytes(self.buffer[HEADER.size:end])
            del self.buffer[:end]
            yield jsonutils.loads(body)

    def send(self, data: bytes) -> None:
        # The caller may have gone (timed out, killed): its reply has no reader.
        with self._send_lock, contextlib.suppress(OSError):
            self.sock.sendall(data)


class _Listener(base.PollStyleListener):
    def __init__(self, path: str):
        super().__init__()
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # left by a server that died
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        for attempt in range(3):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                self._server.bind(path)
                break
            except FileNotFoundError:
                # The topic's last other server removed the directory meanwhile.
                if attempt == 2:
                    raise
        self._server.listen(1024)
        self._wake_read, self._wake_write = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        self._ready: collections.deque[_Incoming] = collections.deque()
        self._stopped = threading.Event()

    @base.batch_poll_helper
    def poll(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ready and not self._stopped.is_set():
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            for key, _ in self._selector.select(wait):
                self._on_readable(key)
            if deadline is not None and time.monotonic() >= deadline:
                break
        return self._ready.popleft() if self._ready else None

    def _on_readable(self, key) -> None:
        if key.data is None:
            sock, _ = self._server.accept()
            self._selector.register(sock, selectors.EVENT_READ, _ServerConnection(sock))
            return
        if key.data == "wake":
            self._wake_read.recv(RECV_BYTES)
            return
        connection: _ServerConnection = key.data
        try:
            data = connection.sock.recv(RECV_BYTES)
        except OSError:
            data = b""
        if not data:
            self._selector.unregister(connection.sock)
            connection.sock.close()
            return
        connection.buffer += data
        for request in connection.frames():
            self._ready.append(_Incoming(request["ctxt"], request["message"], connection,
                                         request["reply"]))

    def stop(self):
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._wake_write.send(b"x")

    def cleanup(self):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):  # the topic's last server removes its directory
            os.rmdir(os.path.dirname(self.path))
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()
        self._wake_write.close()
