"""``fleetflow volumes list|show``: the project's volumes (a cluster's, or all).

::

    fleetflow --project p1 volumes list --vcluster-id vc-...
    fleetflow --project admin --roles admin volumes show VOLUME_UUID

Volumes are made and deleted as members of virtual clusters (``fleetflow
vclusters``); here they are only read. ``backend`` is shown to administrators.
"""

from __future__ import annotations

import click

from fleetflow.cli import remote

FIELDS = ("name", "size", "volume_type", "status", "attached_to", "vcluster_id", "backend",
          "created_at", "updated_at")
# What fits a list row at 160 columns with two uuids in it (show has the rest).
COLUMNS = ("id", *FIELDS[:7])


@click.group("volumes")
def volumes() -> None:
    """List and show volumes."""


@volumes.command("list")
@click.option("--vcluster-id", help="Only the volumes of this virtual cluster.")
@remote.status_option("Only volumes in this status, any case (DELETED ones are left out "
                      "unless asked for).")
@remote.api_command
def list_(vcluster_id, status, as_json):
    """List the project's volumes, where each is attached and (admins) its backend."""
    found = remote.client().list_volumes(vcluster_id=vcluster_id, status=status)
    if as_json:
        remote.print_json(found)
        return
    remote.table("volumes", list(COLUMNS), [[v.get(k) for k in COLUMNS] for v in found])


@volumes.command("show")
@click.argument("volume_id")
@remote.api_command
def show(volume_id, as_json):
    """Show one volume."""
    volume = remote.client().get_volume(volume_id)
    if as_json:
        remote.print_json(volume)
        return
    remote.fields(f"volume {volume['id']}", [(k, volume.get(k)) for k in FIELDS])
