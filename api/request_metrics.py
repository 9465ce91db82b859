"""The API's Prometheus metrics: ``/metrics``, and each request counted and timed by route.

Requests are labelled by their route's pattern (``/v2/<tenant_id>/reservations``),
never by the path itself, so the number of series stays that of the routes.
"""

from __future__ import annotations

import time

import flask

from fleetflow.common import metrics


def _started() -> None:
    flask.g.metrics_started = time.perf_counter()


def _answered(response):
    started = flask.g.pop("metrics_started", None)
    rule = flask.request.url_rule
    route = rule.rule if rule is not None else "unmatched"
    if started is not None and route != "/metrics":
        method = flask.request.method
        metrics.API_LATENCY.labels(route, method).observe(time.perf_counter() - started)
        metrics.API_REQUESTS.labels(route, method, str(response.status_code)).inc()
    return response


def scrape():
    return flask.Response(metrics.exposition(), mimetype=metrics.CONTENT_TYPE)


def install(app: flask.Flask) -> None:
    """Count and time every request of ``app``, and answer ``/metrics``."""
    app.before_request(_started)
    app.after_request(_answered)
    app.add_url_rule("/metrics", "metrics", scrape)
