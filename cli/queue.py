"""``fleetflow queue``: every request waiting for capacity, in queue order.

Through the REST API (``/v2/admin/queue``), as an administrator (as
``fleetflow flows`` is): ``--project`` defaults to ``admin``. Also the
``--queue [--queue-timeout S] [--priority P]`` options of ``reserve`` and
``vclusters create``.
"""

from __future__ import annotations

import functools

import click

from fleetflow.cli import remote, views


def queue_options(command):
    """``--queue``, ``--queue-timeout``, ``--priority``: the command gets ``queue_fields``,
    the request's fields (``when_full`` ...) they give, or a UsageError."""
    @click.option("--queue", "queue", is_flag=True,
                  help="When it does not fit now, wait QUEUED (holding nothing) until all of "
                       "it fits at once, instead of failing with NO_VALID_HOST.")
    @click.option("--queue-timeout", type=click.FloatRange(min=0, min_open=True),
                  metavar="S", help="With --queue: seconds it may wait; then it ends EXPIRED.")
    @click.option("--priority", type=click.IntRange(min=0), metavar="P",
                  help="With --queue: higher first (0 to the cloud's [queue] max_priority).")
    @functools.wraps(command)
    def wrapper(*args, queue, queue_timeout, priority, **kwargs):
        if (queue_timeout is not None or priority is not None) and not queue:
            raise click.UsageError("--queue-timeout and --priority go with --queue")
        fields = {key: value for key, value in (
            ("when_full", "queue" if queue else None), ("queue_timeout", queue_timeout),
            ("priority", priority)) if value is not None}
        return command(*args, queue_fields=fields, **kwargs)
    return wrapper


@click.command("queue")
@remote.api_command
def queue_cmd(as_json) -> None:
    """List the queued reservations and vclusters: position, priority and why each waits."""
    waiting = remote.admin_client().list_queue()
    if as_json:
        remote.print_json(waiting)
        return
    remote.listing(f"{len(waiting)} waiting", views.QUEUE, waiting)
