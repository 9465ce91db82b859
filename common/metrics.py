"""Prometheus metrics of every fleetflow process, in one place so every layer can count.

Counters are incremented where the event happens, in the lowest layer that
knows it (a claim in the jobboard, an atom's end in the conductor's listener,
a request in the API). What is a state rather than an event (flows by state,
hosts by state, the jobboard's depth) is read when Prometheus scrapes: the
process registers a reader (:func:`register_reader`) that returns the current
values, and the collector asks it then, so nothing polls between scrapes.

Every name starts with ``fleetflow_``. ``fleetflow serve`` answers ``/metrics``
on its API port; a standalone conductor or compute agent serves them on
``[metrics] port`` (:func:`serve`, off when 0). docs/console.md lists them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

import prometheus_client
from prometheus_client import core as prom_core

LOG = logging.getLogger(__name__)

REGISTRY = prometheus_client.REGISTRY
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST

ATOMS = prometheus_client.Counter(
    "fleetflow_atoms", "Atoms that ended, by kind (task, retry) and outcome "
    "(executed, failed, reverted, revert_failed).", ["kind", "outcome"])
CLAIMS = prometheus_client.Counter(
    "fleetflow_claims", "Jobs claimed by a conductor of this process, by board.", ["board"])
CLAIM_CONFLICTS = prometheus_client.Counter(
    "fleetflow_claim_conflicts", "Claims lost to another conductor, by board.", ["board"])
RESCHEDULES = prometheus_client.Counter(
    "fleetflow_reschedules", "Instances sent to another host after a failed build.")
RECONCILE_PASSES = prometheus_client.Counter(
    "fleetflow_reconcile_passes", "Passes of the reconciler over the outbox.")
REPOSTED_JOBS = prometheus_client.Counter(
    "fleetflow_reposted_jobs", "Flows the reconciler posted again (a lost post or job).")
BUILD_BATCHES = prometheus_client.Counter(
    "fleetflow_build_batches", "RPCs that carried builds to a compute agent together.")
BATCHED_BUILDS = prometheus_client.Counter(
    "fleetflow_batched_builds", "Builds those RPCs carried (a build still booting when "
    "its batch was answered goes again in a later one, and counts again).")
EVACUATION_MOVES = prometheus_client.Counter(
    "fleetflow_evacuation_moves", "Evacuation moves that ended, by outcome.", ["outcome"])
API_REQUESTS = prometheus_client.Counter(
    "fleetflow_api_requests", "API requests answered, by route, method and status.",
    ["route", "method", "status"])
API_LATENCY = prometheus_client.Histogram(
    "fleetflow_api_request_seconds", "Time to answer an API request, by route and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))

#: A reader returns ``(name, help, {label tuple: value}, label names)`` gauges.
Reader = Callable[[], Iterable[tuple[str, str, dict, tuple[str, ...]]]]
_readers: dict[str, Reader] = {}
_lock = threading.Lock()


def register_reader(key: str, reader: Reader) -> None:
    """Read ``reader``'s gauges at every scrape (one per ``key``: a new one replaces it)."""
    with _lock:
        _readers[key] = reader


def unregister_reader(key: str) -> None:
    with _lock:
        _readers.pop(key, None)


class _StateCollector:
    """The gauges of the registered readers, read when Prometheus scrapes."""

    def collect(self):
        with _lock:
            readers = list(_readers.items())
        for key, reader in readers:
            try:
                gauges = list(reader())
            except Exception:  # noqa: BLE001 - a scrape must not fail on one reader
                LOG.warning("metrics reader %s failed", key, exc_info=True)
                continue
            for name, help_text, values, labels in gauges:
                family = prom_core.GaugeMetricFamily(name, help_text, labels=list(labels))
                for label_values, value in values.items():
                    family.add_metric(list(label_values), value)
                yield family


REGISTRY.register(_StateCollector())


def move_ended(outcome: str, count: int = 1) -> None:
    """``count`` evacuation moves ended ``outcome`` (a move's status: DONE, FAILED, ...)."""
    if count:
        EVACUATION_MOVES.labels(outcome.lower()).inc(count)


def exposition() -> bytes:
    """Every metric of this process in Prometheus' text format."""
    return prometheus_client.generate_latest(REGISTRY)


def serve(port: int, host: str = "0.0.0.0") -> object | None:
    """Serve ``/metrics`` on ``port`` in a thread (``[metrics] port``); None when 0."""
    if not port:
        return None
    server, _thread = prometheus_client.start_http_server(port, addr=host, registry=REGISTRY)
    LOG.info("metrics on %s:%d/metrics", host, port)
    return server
