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
