"""Builds bound for one agent travel together: one RPC carries many ``build_instance``.

A build's own work on a simulated host is one small write; the RPC around it
(encoding, a socket round trip, oslo.messaging's dispatch on both sides, two
thread hand-offs) costs several times as much. A 10,000-instance reservation
sends its builds within seconds, so builds for the same agent server share
calls:

- the client (:class:`BuildQueue`): a build joins its server's queue. While
  fewer than ``IN_FLIGHT`` batches are out to that server, it leaves at once
  with whatever is queued; otherwise it waits, and the first batch to come
  back sends the queue, or after ``LINGER_S`` the build leaves in one more
  batch (those out may be slow boots). A lone build goes alone, and batches
  grow with the load. One caller may wait for many builds at once
  (``build_all``: a group's first builds), its builds queued together.
- the agent (:class:`BuildRunner`): the builds that take no time are written
  in one transaction (``fake_batch``); the others (slow boots, dead hosts) run
  at once on the agent's build threads, each exactly as a single
  ``build_instance``. The answer goes back when all have ended, or after
  ``answer_within`` seconds with the unfinished ones marked pending. An item
  sent again while its build still runs waits for that build instead of
  starting another.
- a pending item goes out with its server's next batch until its caller's
  timeout is spent; then the caller gets OutcomeUnknown, as from a single call
  left unanswered. So a dead host's hanging builds hold up their own callers
  only, and a batch of slow boots gives its place back within ``answer_within``
  to the builds that arrive meanwhile.

Each item's answer is the guest or its error, serialized as oslo.messaging
serializes a call's, so the caller gets the same exception classes back.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures

import oslo_messaging
from oslo_messaging._drivers import common as rpc_common

from fleetflow.common import metrics
from fleetflow.common.exceptions import FleetflowError
from fleetflow.compute import messaging
from fleetflow.compute.exceptions import ComputeError

# Batches out to one agent server at once: enough to keep its threads busy
# while the next batch forms, few enough that batches do form under load.
IN_FLIGHT = 4
# Items of one batch at most: one answer stays a few hundred kilobytes.
MAX_ITEMS = 500
# How long an agent holds a batch whose builds have not all ended.
ANSWER_WITHIN_S = 0.5
# How long a queued build waits for a batch to come back before it leaves in
# one more: batches of slow boots come back late, and a build must not wait
# for another's boot to start its own.
LINGER_S = 0.02

PENDING = {"pending": True}
# What ``send`` answers for the items of an agent that takes no batches (older
# than them): their callers send them alone.
UNBATCHED = object()


# -- the agent's half ------------------------------------------------------------

def failure(exc: BaseException) -> str:
    """``exc`` as oslo.messaging sends a call's error (fleetflow's keep their details)."""
    if isinstance(exc, FleetflowError):
        exc.kwargs = dict(exc.details)
    return rpc_common.serialize_remote_exception((type(exc), exc, exc.__traceback__))


def remote_error(failure_: str, method: str) -> Exception:
    """The error :func:`failure` sent, as the caller raises it: fleetflow's and the
    compute errors with their class, any other a ComputeError of ``method``."""
    error = rpc_common.deserialize_remote_exception(failure_, messaging.ALLOWED_REMOTE_EXMODS)
    if isinstance(error, oslo_messaging.RemoteError):
        return ComputeError(f"{method} failed: {error.exc_type}: {error.value}", method=method)
    return error


class BuildRunner:
    """Runs the items of build batches: ``at_once(items)`` first (one outcome an item:
    the guest, its error, or None for one to run alone), the rest on ``pool``
    through ``build(**item)``."""

    def __init__(self, build: Callable[..., dict], pool,
                 at_once: Callable[[list], list] | None = None):
        self._build = build
        self._pool = pool
        self._at_once = at_once
        self._lock = threading.Lock()
        self._running: dict[tuple, futures.Future] = {}

    def run(self, builds: list[Mapping], answer_within: float) -> list[dict]:
        """One answer an item, in order: ``{"guest"}``, ``{"failure"}`` or pending."""
        answers: list = [None] * len(builds)
        alone: dict[int, futures.Future] = {}
        with self._lock:
            fresh = []
            for index, item in enumerate(builds):
                future = self._running.get(_key(item))
                if future is None:
                    fresh.append(index)
                else:
                    alone[index] = future
        outcomes = (self._at_once([builds[i] for i in fresh]) if self._at_once and fresh
                    else [None] * len(fresh))
        for index, outcome in zip(fresh, outcomes, strict=True):
            if outcome is None:
                alone[index] = self._start(builds[index])
            elif isinstance(outcome, BaseException):
                answers[index] = {"failure": failure(outcome)}
            else:
                answers[index] = {"guest": outcome}
        if alone:
            futures.wait(alone.values(), timeout=max(0.0, answer_within))
            for index, future in alone.items():
                answers[index] = _answer(future)
        return answers

    def _start(self, item: Mapping) -> futures.Future:
        key = _key(item)
        with self._lock:
            future = self._running.get(key)
            if future is not None:
                return future
            future = self._running[key] = self._pool.submit(self._build, **item)
        future.add_done_callback(lambda done: self._forget(key, done))
        return future

    def _forget(self, key: tuple, done: futures.Future) -> None:
        with self._lock:
            if self._running.get(key) is done:
                del self._running[key]


def _key(item: Mapping) -> tuple:
    # A build of the same guest under another owner's token is not the same
    # build: it must meet the host's fence check itself.
    fence = item.get("fence") or {}
    return item["host"], item["uuid"], fence.get("key"), fence.get("token")


def _answer(future: futures.Future) -> dict:
    if not future.done():
        return PENDING
    exc = future.exception()
    if exc is None:
        return {"guest": future.result()}
    return {"failure": failure(exc)}


# -- the client's half -----------------------------------------------------------

class _Build:
    __slots__ = ("request", "timeout", "deadline", "wake", "batch", "outcome", "queued")

    def __init__(self, request: dict, timeout: float, wake: threading.Event):
        self.request = request
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.wake = wake  # its caller's, shared by every build the caller waits for
        self.batch: list[_Build] | None = None  # set when this caller sends the next batch
        self.outcome: tuple | None = None  # (guest, None) or (None, exception)
        self.queued = False  # in its lane's queue, waiting for a batch to leave in


class _Lane:
    __slots__ = ("lock", "queue", "in_flight")

    def __init__(self):
        self.lock = threading.Lock()
        self.queue: list[_Build] = []
        self.in_flight = 0

    def put(self, entries: list[_Build]) -> None:
        """Queue ``entries`` ahead of those queued (they are the older ones)."""
        for entry in entries:
            entry.queued = True
        self.queue[:0] = entries

    def take(self) -> list[_Build]:
        batch, self.queue = self.queue[:MAX_ITEMS], self.queue[MAX_ITEMS:]
        for entry in batch:
            entry.queued = False
        return batch


class BuildQueue:
    """Sends builds in batches, one queue an agent server.

    ``send(server, requests, answer_within, timeout)`` makes one batch call and
    returns one answer a request; it raises what the whole call failed with.
    ``decode(failure)`` turns an item's serialized failure into the exception to raise.
    ``expired(request, timeout)`` is the error of an item still pending at its
    caller's deadline.
    """

    def __init__(self, send: Callable, decode: Callable[[str], BaseException],
                 expired: Callable[[dict, float], BaseException]):
        self._send_batch = send
        self._decode = decode
        self._expired = expired
        self._lock = threading.Lock()
        self._lanes: dict[str, _Lane] = {}

    def build(self, server: str, request: dict, timeout: float) -> dict:
        """The guest of ``request`` once its host answered; raises the host's error."""
        [(guest, error)] = self.build_all([(server, request)], timeout)
        if error is not None:
            raise error
        return guest

    def build_all(self, items: list[tuple[str, dict]], timeout: float) -> list[tuple]:
        """Outcomes of ``(server, request)`` builds, in order, once every host answered:
        ``(guest, None)`` or ``(None, error)``. One caller waits for them all."""
        wake = threading.Event()
        entries = [(server, self._lane(server), _Build(request, timeout, wake))
                   for server, request in items]
        for _server, lane, entry in entries:
            with lane.lock:
                entry.queued = True
                lane.queue.append(entry)
        for server, lane in {server: lane for server, lane, _ in entries}.items():
            self._send_if(server, lane, lambda lane=lane: lane.in_flight < IN_FLIGHT)
        while any(entry.outcome is None for _, _, entry in entries):
            queued = any(entry.queued for _, _, entry in entries)
            if not wake.wait(LINGER_S if queued else None):
                # Every batch out is held by slow builds: ours go anyway.
                for server, lane, entry in entries:
                    self._send_if(server, lane, lambda entry=entry: entry.queued)
                continue
            wake.clear()
            for server, lane, entry in entries:
                if entry.batch:
                    batch, entry.batch = entry.batch, None
                    self._send(server, lane, batch)
        return [entry.outcome for _, _, entry in entries]

    def _send_if(self, server: str, lane: _Lane, condition: Callable[[], bool]) -> None:
        """Send what ``lane`` has queued, as one more batch out, if ``condition()`` holds."""
        with lane.lock:
            if not lane.queue or not condition():
                return
            lane.in_flight += 1
            batch = lane.take()
        self._send(server, lane, batch)

    def _error(self, failure: str) -> BaseException:
        try:
            return self._decode(failure)
        except Exception as exc:  # noqa: BLE001 - its caller must hear of it, not hang
            return exc

    def _lane(self, server: str) -> _Lane:
        with self._lock:
            lane = self._lanes.get(server)
            if lane is None:
                lane = self._lanes[server] = _Lane()
            return lane

    def _send(self, server: str, lane: _Lane, batch: list[_Build]) -> None:
        now = time.monotonic()
        answer_within = min(ANSWER_WITHIN_S, max(0.0, min(b.deadline for b in batch) - now))
        metrics.BUILD_BATCHES.inc()
        metrics.BATCHED_BUILDS.inc(len(batch))
        try:
            answers = self._send_batch(server, [b.request for b in batch], answer_within,
                                       max(b.deadline for b in batch) - now)
        except Exception:  # noqa: BLE001 - every caller of the batch gets it
            error = sys.exc_info()[1]
            answers = [error] * len(batch)
        done, again = [], []
        now = time.monotonic()
        for entry, answer in zip(batch, answers, strict=True):
            if isinstance(answer, BaseException):
                entry.outcome = (None, answer)
            elif answer is UNBATCHED:
                entry.outcome = (UNBATCHED, None)
            elif answer.get("pending"):
                if now < entry.deadline:
                    again.append(entry)
                    continue
                entry.outcome = (None, self._expired(entry.request, entry.timeout))
            elif answer.get("failure"):
                entry.outcome = (None, self._error(answer["failure"]))
            else:
                entry.outcome = (answer.get("guest"), None)
            done.append(entry)
        leader = None
        with lane.lock:
            lane.put(again)
            if lane.queue:
                nxt = lane.take()
                leader = nxt[0]
                leader.batch = nxt
            else:
                lane.in_flight -= 1
        # Once per waiting caller, not per build: its many builds share one event,
        # and each set() after the first only hands the lock back and forth with
        # the caller it already woke.
        wakes = {id(entry.wake): entry.wake for entry in done}
        if leader is not None:
            wakes[id(leader.wake)] = leader.wake
        for wake in wakes.values():
            wake.set()
