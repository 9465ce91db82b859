"""Builds whose hosts report back, so that nothing waits on an open call.

A boot through ``ComputeAPI.build_instance`` holds a thread for the whole boot:
a reservation of a thousand instances holds a thousand conductor threads, each
started, woken and switched to on the one interpreter lock the engine needs.
Nova's conductor does not wait: it casts the build to the compute host, which
reports when the guest is up. Here:

- the conductor process runs one :class:`BuildReports` (an RPC server of its
  own, ``Target(topic=[messaging] report_topic, server=<unique name>)``);
- ``ComputeAPI.start_build`` registers a future under a fresh token and casts
  ``build_instance_and_report`` with that address;
- the agent builds as for a call (same idempotent driver method), then casts
  ``builds_reported`` with the guest or the serialized error (with the other
  reports to the same conductor queued meanwhile: see :class:`Reporter`);
- the future is settled by the report, or fails with OutcomeUnknown when no
  report came within the timeout (the agent may have died, or restarted, or
  the report was lost): exactly what a timed-out call means, so the caller
  asks the host before building again (``ensure_built``).

A report for a token nobody waits for (its future timed out, or the process
that sent the build died and another conductor resumed the boot) is dropped:
the resumed boot asks the host itself.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import socket
import sys
import threading
import time
import uuid as uuidlib
from concurrent import futures

import oslo_messaging
from oslo_messaging._drivers import common as rpc_common

from fleetflow.common.exceptions import FleetflowError
from fleetflow.compute import messaging
from fleetflow.compute.exceptions import ComputeError, OutcomeUnknown
from fleetflow.compute.rpc_pool import RPCServer

LOG = logging.getLogger(__name__)

REPORT_THREADS = 4


class _ReportsEndpoint:
    target = oslo_messaging.Target(version=messaging.RPC_API_VERSION)

    def __init__(self, reports: BuildReports):
        self._reports = reports

    def builds_reported(self, ctxt, reports):
        for report in reports:
            self._reports.settle(report["token"], guest=report.get("guest"),
                                 failure=report.get("failure"))


class BuildReports:
    """Futures of builds in flight, settled by their hosts' reports (thread-safe)."""

    def __init__(self, conf, transport):
        self.conf = conf
        self.transport = transport
        self.topic = conf.messaging.report_topic
        self.server_name = f"{socket.gethostname()}-{os.getpid()}-{uuidlib.uuid4().hex[:8]}"
        self._waiting: dict[str, tuple[futures.Future, str]] = {}
        self._deadlines: list[tuple[float, int, str]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._server = None
        self._timer: threading.Thread | None = None
        self._stopped = False

    def start(self) -> BuildReports:
        target = oslo_messaging.Target(topic=self.topic, server=self.server_name)
        self._server = oslo_messaging.get_rpc_server(
            self.transport, target, [_ReportsEndpoint(self)], server_cls=RPCServer)
        self._server.prestart = REPORT_THREADS
        self._server.start(override_pool_size=REPORT_THREADS)
        self._timer = threading.Thread(target=self._expire, name="build-report-timeouts",
                                       daemon=True)
        self._timer.start()
        return self

    def stop(self) -> None:
        """Stop listening; builds still waiting fail with OutcomeUnknown."""
        with self._cond:
            if self._stopped:
                return
            self._stopped = True
            waiting, self._waiting = self._waiting, {}
            self._cond.notify_all()
        for future, what in waiting.values():
            future.set_exception(OutcomeUnknown(f"{what}: stopped waiting for its report"))
        if self._server is not None:
            self._server.stop()
            self._server.wait()

    def address(self, token: str) -> dict:
        """Where the host sends its report (an argument of the build cast)."""
        return {"topic": self.topic, "server": self.server_name, "token": token}

    def expect(self, timeout: float, what: str) -> tuple[str, futures.Future]:
        """A token to send with a build and the future its report settles."""
        token = uuidlib.uuid4().hex
        future: futures.Future = futures.Future()
        future.set_running_or_notify_cancel()
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._stopped:
                raise OutcomeUnknown(f"{what}: build reports are stopped")
            self._waiting[token] = (future, what)
            first = not self._deadlines or deadline < self._deadlines[0][0]
            heapq.heappush(self._deadlines, (deadline, next(self._order), token))
            if first:
                self._cond.notify()
        return token, future

    def fail(self, token: str, exc: Exception) -> None:
        """Settle ``token``'s future with ``exc`` (the build could not be sent)."""
        with self._cond:
            entry = self._waiting.pop(token, None)
        if entry is not None:
            entry[0].set_exception(exc)

    def settle(self, token: str, guest=None, failure=None) -> None:
        with self._cond:
            entry = self._waiting.pop(token, None)
        if entry is None:
            LOG.debug("report %s has no waiter (timed out or sent before a restart)", token)
            return
        future, what = entry
        if failure is None:
            future.set_result(guest)
            return
        error = rpc_common.deserialize_remote_exception(
            failure, messaging.ALLOWED_REMOTE_EXMODS)
        if isinstance(error, oslo_messaging.RemoteError):
            # A failure whose class is not one of ours (a bug on the host).
            error = ComputeError(f"{what} failed: {error.exc_type}: {error.value}")
        future.set_exception(error)

    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    def _expire(self) -> None:
        while True:
            expired = []
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                while self._deadlines and self._deadlines[0][0] <= now:
                    _, _, token = heapq.heappop(self._deadlines)
                    entry = self._waiting.pop(token, None)
                    if entry is not None:
                        expired.append(entry)
                if not expired:
                    self._cond.wait(self._deadlines[0][0] - now if self._deadlines else None)
                    continue
            for future, what in expired:
                future.set_exception(OutcomeUnknown(
                    f"{what}: no report within the timeout; the host may or may not "
                    "have built it"))


class Reporter:
    """The agent's half: casts builds' outcomes to the addresses they came with.

    Builds of one reservation end together. The first of them to report sends
    everything queued for its conductor meanwhile in one cast (and goes on
    while more arrive), the others return at once: a thousand boots ending
    within a second cost tens of messages, not a thousand, on both sides.
    """

    def __init__(self, transport):
        self.transport = transport
        self._clients: dict[tuple[str, str], oslo_messaging.RPCClient] = {}
        self._queued: dict[tuple[str, str], list[dict]] = {}
        self._lock = threading.Lock()

    def _client(self, topic: str, server: str):
        client = self._clients.get((topic, server))
        if client is None:
            target = oslo_messaging.Target(topic=topic, server=server,
                                           version=messaging.RPC_API_VERSION)
            # retry=0: a conductor that is gone is not waited for; the one
            # that resumes its flow asks the host instead.
            client = oslo_messaging.get_rpc_client(self.transport, target, retry=0)
            self._clients[(topic, server)] = client
        return client

    def report(self, address: dict, guest=None, failure: str | None = None) -> None:
        key = (address["topic"], address["server"])
        item = {"token": address["token"], "guest": guest, "failure": failure}
        with self._lock:
            queued = self._queued.get(key)
            if queued is not None:  # another thread is sending to this conductor
                queued.append(item)
                return
            self._queued[key] = []
            client = self._client(*key)
        batch = [item]
        while batch:
            try:
                client.cast({}, "builds_reported", reports=batch)
            except oslo_messaging.MessagingException as exc:
                LOG.info("%d build reports to %s not delivered (%s); its conductor will "
                         "ask", len(batch), key[1], exc)
            with self._lock:
                batch = self._queued[key]
                if batch:
                    self._queued[key] = []
                else:
                    del self._queued[key]


def serialize_failure() -> str:
    """The exception being handled, as the report's ``failure`` (its class crosses)."""
    exc = sys.exc_info()[1]
    if isinstance(exc, FleetflowError):
        exc.kwargs = dict(exc.details)
    return rpc_common.serialize_remote_exception(sys.exc_info())
