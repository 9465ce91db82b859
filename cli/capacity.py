"""``fleetflow capacity``: what is used and free where, per region, zone, rack and host.

::

    fleetflow capacity                      # the fleet, each region and zone
    fleetflow capacity --zone z1 --by rack  # one zone, down to its racks
    fleetflow capacity --by host --json

Through the REST API (``GET /v2/admin/capacity``), as an administrator unless
``--roles`` or ``--token`` say otherwise, as ``fleetflow flows`` does.
"""

from __future__ import annotations

import click

from fleetflow.cli import remote, views

# The API's levels (the CLI does not import server code).
LEVELS = ("region", "zone", "rack", "host")


@click.command("capacity")
@click.option("--region", help="Only this region.")
@click.option("--zone", help="Only this zone.")
@click.option("--by", type=click.Choice(LEVELS), default="zone", show_default=True,
              help="The deepest level listed.")
@remote.api_command
def capacity_cmd(region, zone, by, as_json) -> None:
    """Capacity of the fleet: used/total per resource class, hosts by state, instances,
    per region › zone › rack › host; storage backends (administrators)."""
    report = remote.admin_client().capacity(region=region, zone=zone, by=by)
    if as_json:
        remote.print_json(report)
        return
    remote.table("capacity (used/total)", list(views.CAPACITY_COLUMNS),
                 views.capacity_rows(report))
    if report.get("backends"):
        remote.table("storage backends (used/total)", list(views.BACKEND_COLUMNS),
                     [views.backend_row(b) for b in report["backends"]])
