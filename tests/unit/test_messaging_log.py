"""A RabbitMQ outage seen by an RPC server: a few lines, not one per reconnect attempt.

RabbitMQ is reached through a TCP relay the test cuts and restores, so the
shared broker never stops. oslo.messaging's own reconnect loop makes the
attempts (one a second); the test waits for a number of them, and moves the
repeat filter's clock instead of waiting a minute.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
import uuid

import oslo_messaging
import pytest

from fleetflow.common.log_throttle import RepeatFilter, Throttle
from fleetflow.compute import messaging

# It waits out a broker outage.
pytestmark = pytest.mark.slow

RABBIT_LOGGER = "oslo.messaging._drivers.impl_rabbit"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Echo:
    target = oslo_messaging.Target(version="1.0")

    def echo(self, ctxt, value):
        return value


def _wait(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.05)


def _repeat_filter() -> RepeatFilter:
    """The filter getting a transport put on oslo.messaging's rabbit logger."""
    (found,) = [f for f in logging.getLogger(RABBIT_LOGGER).filters
                if isinstance(f, RepeatFilter)]
    return found


def _attempts(prefix: str = "") -> int:
    return sum(count for (name, _level, msg), count
               in _repeat_filter().throttle.occurrences().items()
               if name == RABBIT_LOGGER and str(msg).startswith(prefix))


def test_a_broker_outage_is_a_line_per_message_and_a_minute(make_conf, rabbit_url, tcp_proxy,
                                                            caplog):
    proxy = tcp_proxy(urllib.parse.urlsplit(rabbit_url).port or 5672)
    url = f"rabbit://guest:guest@127.0.0.1:{proxy.port}/"
    conf = make_conf(messaging={"transport_url": url})
    messaging.register_library_opts(conf)
    for option, value in (("rabbit_retry_backoff", 0), ("kombu_reconnect_delay", 0.0),
                          ("heartbeat_timeout_threshold", 0)):
        conf.set_override(option, value, group="oslo_messaging_rabbit")
    transport = messaging.get_transport(conf)
    repeats = _repeat_filter()
    # A throttle of its own, on a clock the test moves: what earlier tests of
    # this process logged through the filter changes nothing.
    real_throttle, repeats.throttle = repeats.throttle, Throttle(clock=Clock())
    topic = f"quiet-{uuid.uuid4().hex}"
    server = oslo_messaging.get_rpc_server(
        transport, oslo_messaging.Target(topic=topic, server="h1"), [Echo()],
        executor="threading")
    server.start()
    client = oslo_messaging.get_rpc_client(transport, oslo_messaging.Target(topic=topic),
                                           timeout=30)
    caplog.set_level(logging.INFO, logger=RABBIT_LOGGER)
    try:
        assert client.call({}, "echo", value=1) == 1
        before = _attempts()

        proxy.stop()
        _wait(lambda: _attempts() >= before + 6, "six reconnect attempts")
        repeats.throttle.clock.now += 61
        seen = _attempts()
        _wait(lambda: _attempts() > seen, "an attempt a minute into the outage")
        attempts = _attempts() - before
        proxy.start()
        _wait(lambda: any("Reconnected" in r.getMessage() for r in caplog.records),
              "the reconnection")
        assert client.call({}, "echo", value=2) == 2
    finally:
        server.stop()
        server.wait()
        messaging.forget_transport(conf)
        repeats.throttle = real_throttle

    errors = [r.getMessage() for r in caplog.records
              if r.name == RABBIT_LOGGER and r.levelno >= logging.WARNING]
    assert attempts >= 7
    assert 1 <= len(errors) <= 2 * len({m.split("]")[-1][:40] for m in errors}), errors
    assert len(errors) < attempts
    assert any("more like it in the last 61 s" in m for m in errors), errors
