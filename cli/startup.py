"""What every serving command (serve, conductor, compute-agent) checks before it starts."""

from __future__ import annotations

import click

from fleetflow.common import config


def check_config(conf) -> None:
    """Stop with one clear line when the configuration contradicts itself."""
    try:
        config.check(conf)
    except config.ConflictingOptions as exc:
        raise click.ClickException(str(exc)) from None


def start_metrics(conf, database, persistence=None, board=None):
    """Register the gauges this process can read (services/metrics_readers.py) and, for a
    standalone conductor or compute agent, serve ``/metrics`` on ``[metrics] port``
    (0: none). ``fleetflow serve`` answers ``/metrics`` on its API port and only
    registers the readers (:func:`register_metrics`).

    Returns the metrics HTTP server, or None when none was started.
    """
    from fleetflow.common import metrics

    register_metrics(conf, database, persistence, board)
    if not conf.metrics.port:
        return None
    try:
        return metrics.serve(conf.metrics.port, conf.metrics.host)
    except OSError as exc:
        raise click.ClickException(f"cannot serve metrics on {conf.metrics.host}:"
                                   f"{conf.metrics.port}: {exc}") from None


def register_metrics(conf, database, persistence=None, board=None) -> None:
    """The gauges this process reads at each scrape: hosts, and flows and the board when
    it runs them."""
    from fleetflow.services import metrics_readers

    metrics_readers.register(conf, database, backend=persistence, board=board)
