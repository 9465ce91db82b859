"""oslo.messaging plumbing shared by the compute agent and its client.

One RPC transport per process and URL (oslo.messaging's advice; also the only
way in-process transports work: ``fake:`` keeps its queues inside the transport
object, so a client with a transport of its own would never reach the server).

On a broker (rabbit://) oslo.messaging's pools are sized for the concurrency
fleetflow itself creates, not for its defaults: a 50-instance flow has 50
engine threads calling at once and an agent as many threads replying, which
overflowed the 30 pooled connections ("Connection pool limit exceeded") and
the 10 reply queues after which it suspects a leak ("Number of call queues is
11 ... There could be a leak"): two dozen warnings per healthy flow. The pool
grows only as far as the calls made at once need (its connections are made on
demand and expire when idle), so a high ceiling costs nothing until used.

While the broker is down, oslo.messaging logs each reconnect attempt of each
connection at ERROR: a 15 s RabbitMQ restart was some 800 lines from one
agent. Its loggers get a repeat filter (``common/log_throttle.py``): the
first of each message passes, then at most one a minute with a count.
oslo.messaging still says at INFO when each connection is back.
"""

from __future__ import annotations

import logging
import threading

import oslo_messaging
from oslo_config import cfg

from fleetflow.common.log_throttle import RepeatFilter, install_repeat_filter

# Exceptions whose class crosses the wire: the client gets the same class back.
ALLOWED_REMOTE_EXMODS = ["fleetflow.common.exceptions", "fleetflow.compute.exceptions"]
# What the client's calls ask of an agent, and the newest an agent implements:
# 1.1 added ``build_instances`` (batched builds), 1.2 ``destroy_instances``
# (batched destroys), each asked only by those calls, so a 1.0 agent still
# takes every other call.
RPC_API_VERSION = "1.0"
BUILD_BATCH_VERSION = "1.1"
DESTROY_BATCH_VERSION = "1.2"
AGENT_API_VERSION = DESTROY_BATCH_VERSION

# Threads beyond the engines' and agents' that may call or reply at once: API
# requests, the audit's parallel host queries, heartbeats.
OTHER_RPC_THREADS = 64

# The oslo.messaging loggers that log a broker's connection errors (the rabbit
# driver's loggers are named "oslo.messaging...", the others after their module).
OSLO_MESSAGING_LOGGERS = ("oslo.messaging._drivers.impl_rabbit",
                          "oslo.messaging._drivers.pool",
                          "oslo_messaging._drivers.amqpdriver",
                          "oslo_messaging._drivers.common",
                          "oslo_messaging.server", "oslo_messaging.rpc.server")

_lock = threading.Lock()
# Kept on the ConfigOpts itself: a transport is bound to the conf it was made
# from, and the cache then lives exactly as long as that conf.
_CACHE_ATTR = "_fleetflow_rpc_transports"


def register_library_opts(conf: cfg.ConfigOpts) -> None:
    """Register the option groups oslo.messaging reads but only registers on cfg.CONF.

    With a private ConfigOpts the first call otherwise fails with
    NoSuchOptError for ``oslo_messaging_tracing``, then ``oslo_messaging_metrics``.
    """
    from oslo_messaging import opts as library_opts
    from oslo_messaging._metrics import client as metrics
    from oslo_messaging._tracing import client as tracing

    for group, opts in (("oslo_messaging_tracing", tracing.oslo_messaging_tracing),
                        ("oslo_messaging_metrics", metrics.oslo_messaging_metrics)):
        conf.register_opts(opts, group=group)
    for group, opts in library_opts.list_opts():
        conf.register_opts(opts, group=group)


def rpc_callers(conf: cfg.ConfigOpts) -> int:
    """Most threads of one process that can wait on an RPC call at once: every
    engine thread of every conductor worker, and the others."""
    return (max(1, conf.conductor.workers) * conf.conductor.engine_workers
            + OTHER_RPC_THREADS)


def rpc_senders(conf: cfg.ConfigOpts) -> int:
    """Most threads of one process that can send at once: callers, and an
    agent's worker threads sending their replies."""
    agent_threads = conf.compute.agent_threads or conf.compute.max_agent_threads
    return rpc_callers(conf) + agent_threads


def _size_pools(conf: cfg.ConfigOpts) -> None:
    # Defaults, not overrides: an operator's own [oslo_messaging_rabbit] wins.
    conf.set_default("rpc_conn_pool_size", rpc_senders(conf), group="oslo_messaging_rabbit")


def _raise_call_queue_threshold(transport: oslo_messaging.Transport, callers: int) -> None:
    """Warn of leaked reply queues only beyond ``callers`` calls waiting at once.

    oslo.messaging hard-codes the threshold (10, doubled at each warning) on
    the reply waiter its AMQP driver creates with the first call.
    """
    driver = getattr(transport, "_driver", None)
    make_reply_queue = getattr(driver, "_get_reply_q", None)
    if make_reply_queue is None or not hasattr(driver, "_waiter"):
        return

    def _get_reply_q():
        reply_q = make_reply_queue()
        waiters = getattr(getattr(driver, "_waiter", None), "waiters", None)
        if waiters is not None and getattr(waiters, "_wrn_threshold", callers) < callers:
            waiters._wrn_threshold = callers
        return reply_q

    driver._get_reply_q = _get_reply_q


def repeat_filter() -> RepeatFilter:
    """The filter on oslo.messaging's loggers (installed once per process)."""
    return install_repeat_filter(OSLO_MESSAGING_LOGGERS)


def get_transport(conf: cfg.ConfigOpts, url: str | None = None) -> oslo_messaging.Transport:
    """The process's RPC transport for ``url`` (``[messaging] transport_url`` by default)."""
    url = url or conf.messaging.transport_url
    repeat_filter()
    with _lock:
        cache = conf.__dict__.setdefault(_CACHE_ATTR, {})
        transport = cache.get(url)
        if transport is None:
            register_library_opts(conf)
            if url.startswith("kombu+memory"):
                # oslo.messaging warns on every connection that choosing kombu
                # through the URL is experimental; in-process it is our default.
                logging.getLogger("oslo.messaging._drivers.impl_rabbit").setLevel(logging.ERROR)
                # The in-memory broker has no heartbeats; without this every
                # connection logs a warning saying so.
                conf.set_override("heartbeat_timeout_threshold", 0,
                                  group="oslo_messaging_rabbit")
            _size_pools(conf)
            transport = oslo_messaging.get_rpc_transport(
                conf, url=url, allowed_remote_exmods=ALLOWED_REMOTE_EXMODS)
            _raise_call_queue_threshold(transport, rpc_callers(conf))
            cache[url] = transport
        return transport


def forget_transport(conf: cfg.ConfigOpts, url: str | None = None) -> None:
    """Close and drop a cached transport (tests, process shutdown)."""
    url = url or conf.messaging.transport_url
    with _lock:
        transport = conf.__dict__.get(_CACHE_ATTR, {}).pop(url, None)
    if transport is not None:
        transport.cleanup()
