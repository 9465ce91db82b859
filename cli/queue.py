"""``fleetflow queue``: every request waiting for capacity, in queue order.

Through the REST API (``/v2/admin/queue``), as an administrator (as
``fleetflow flows`` is): ``--project`` defaults to ``admin``.
"""

from __future__ import annotations

import click

from fleetflow.cli import remote, views


@click.command("queue")
@remote.api_command
def queue_cmd(as_json) -> None:
    """List the queued reservations and vclusters: position, priority and why each waits."""
    waiting = remote.admin_client().list_queue()
    if as_json:
        remote.print_json(waiting)
        return
    remote.listing(f"{len(waiting)} waiting", views.QUEUE, waiting)
