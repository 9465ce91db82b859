"""oslo.messaging plumbing shared by the compute agent and its client.

One RPC transport per process and URL (oslo.messaging's advice; also the only
way in-process transports work: ``fake:`` keeps its queues inside the transport
object, so a client with a transport of its own would never reach the server).
"""

from __future__ import annotations

import logging
import threading

import oslo_messaging
from oslo_config import cfg

# Exceptions whose class crosses the wire: the client gets the same class back.
ALLOWED_REMOTE_EXMODS = ["fleetflow.common.exceptions", "fleetflow.compute.exceptions"]
RPC_API_VERSION = "1.0"

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


def get_transport(conf: cfg.ConfigOpts, url: str | None = None) -> oslo_messaging.Transport:
    """The process's RPC transport for ``url`` (``[messaging] transport_url`` by default)."""
    url = url or conf.messaging.transport_url
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
            transport = oslo_messaging.get_rpc_transport(
                conf, url=url, allowed_remote_exmods=ALLOWED_REMOTE_EXMODS)
            cache[url] = transport
        return transport


def forget_transport(conf: cfg.ConfigOpts, url: str | None = None) -> None:
    """Close and drop a cached transport (tests, process shutdown)."""
    url = url or conf.messaging.transport_url
    with _lock:
        transport = conf.__dict__.get(_CACHE_ATTR, {}).pop(url, None)
    if transport is not None:
        transport.cleanup()
