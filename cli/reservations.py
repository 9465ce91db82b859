"""``fleetflow reserve`` and ``fleetflow reservations list|show|delete|watch``.

::

    fleetflow --project p1 reserve --count 10 --flavor m1.small --image cirros \\
        --capability gpu=true --capability region=north-america --group web --watch
"""

from __future__ import annotations

import time

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fleetflow.cli import remote, views
from fleetflow.cli.groups import find_group
from fleetflow.cli.queue import queue_options

# Statuses after which a reservation no longer changes by itself (the API's
# SETTLED set; the CLI does not import server code).
SETTLED = ("ACTIVE", "PARTIAL", "ERROR", "REVERTED", "DELETED", "PAUSED", "EXPIRED")


def watch(client, reservation_id: str, interval: float, show_bar: bool = True,
          instances: bool = False) -> dict:
    """Poll until the reservation settles; a rich progress bar meanwhile.

    Polls its status and progress alone, without its instances: a page of a
    thousand of them costs the server several times more, polled by every
    watcher while it builds. Returns the reservation as it settled; with
    ``instances``, read once more with every instance.

    Ctrl-C stops the watching only: the reservation goes on, and the command to
    watch it again is printed.
    """
    with remote.interruptible("reservation", reservation_id, "reservations watch"):
        settled = _watch(client, reservation_id, interval, show_bar)
        return client.get_reservation(reservation_id) if instances else settled


def _watch(client, reservation_id: str, interval: float, show_bar: bool) -> dict:
    reservation = client.get_reservation(reservation_id, instances=False)
    if not show_bar:
        while reservation["status"] not in SETTLED:
            time.sleep(interval)
            reservation = client.get_reservation(reservation_id, instances=False)
        return reservation
    columns = [TextColumn("[bold]{task.fields[status]:<10}"), BarColumn(),
               MofNCompleteColumn(), TextColumn("{task.fields[detail]}"), TimeElapsedColumn()]
    with Progress(*columns, console=remote.console(), transient=False) as bar:
        task = bar.add_task(reservation_id, total=None, status="", detail="")
        while True:
            counts = reservation["progress"]
            # The bar is what stands built: a reverted or failed instance is not
            # progress, so a REVERTED reservation never reads full.
            bar.update(task, total=counts["total"] or None, completed=counts["active"],
                       status=reservation["status"],
                       detail=f"active {counts['active']}  building {counts['building']}  "
                              f"error {counts['error']}  reverted {counts['reverted']}"
                              f"  deleted {counts.get('deleted', 0)}")
            if reservation["status"] in SETTLED:
                return reservation
            time.sleep(interval)
            reservation = client.get_reservation(reservation_id, instances=False)


def _print_reservation(reservation: dict) -> None:
    remote.show(views.RESERVATION, reservation)
    instances = reservation.get("instances") or []
    if instances:
        remote.table("instances", list(views.INSTANCE_COLUMNS),
                     [views.instance_row(i) for i in instances])


def _settled_exit(reservation: dict) -> None:
    remote.settled_exit(reservation["status"], ("ACTIVE", "DELETED"))


@click.command("reserve")
@click.option("--count", type=click.IntRange(min=1), help="Exactly this many instances.")
@click.option("--min-count", type=click.IntRange(min=1), help="Fewest acceptable.")
@click.option("--max-count", type=click.IntRange(min=1), help="Most to build.")
@click.option("--flavor", required=True, help="Flavor name or id.")
@click.option("--image", default="cirros", show_default=True, help="Image name or id.")
@click.option("--capability", "capabilities", multiple=True, metavar="KEY=VALUE",
              help="Host capability each instance needs (gpu=true, cores>=4, "
                   "'arch=in x86 arm'); repeatable.")
@click.option("--group", help="Server group id or name (all instances join it).")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="Metadata of each server (repeat it): ha=true, recovery=never, "
                   "recovery_priority=N steer automatic recovery.")
@click.option("--policy", type=click.Choice(["all-or-nothing", "best-effort"]),
              default="all-or-nothing", show_default=True, help="What a failure does.")
@click.option("--volume-gb", type=click.IntRange(min=1), help="A data volume per instance.")
@click.option("--on-error", type=click.Choice(["revert", "pause"]), default=None,
              help="When an instance runs out of hosts: revert (the default) undoes the "
                   "reservation; pause stops it, PAUSED, for 'fleetflow flows resume|revert'.")
@click.option("--name", help="Name of the reservation (instances are NAME-0000, ...).")
@click.option("--idempotency-key", help="Retrying with the same key returns the first "
                                        "reservation instead of making another.")
@queue_options
@click.option("--dry-run", is_flag=True,
              help="Only say whether it fits now (exit 3 when it does not).")
@click.option("--watch", "watch_", is_flag=True, help="Show progress until it settles.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between polls with --watch.")
@remote.api_command
def reserve(count, min_count, max_count, flavor, image, capabilities, group, properties,
            policy, volume_gb, on_error, name, idempotency_key, queue_fields,
            dry_run, watch_, interval, as_json):
    """Reserve N instances in one request: one flow places and boots them all.

    The reservation id is printed as soon as the API takes the request. With
    --watch the exit status is 0 when the reservation ends ACTIVE, 4 when it
    ends otherwise (PARTIAL, ERROR, REVERTED), 5 when it stops PAUSED and 130
    on Ctrl-C (the reservation goes on). With --dry-run it is 0 when the request fits now and
    3 when it does not.
    """
    client = remote.client()
    body: dict = {"flavor_ref": flavor, "image_ref": image, "policy": policy,
                  "capabilities": remote.key_values(capabilities, "--capability")}
    if count is not None:
        body["count"] = count
    if min_count is not None:
        body["min_count"] = min_count
    if max_count is not None:
        body["max_count"] = max_count
    if count is None and min_count is None and max_count is None:
        raise click.UsageError("give --count, or --min-count and/or --max-count")
    for key, value in (("name", name), ("volume_gb", volume_gb), ("on_error", on_error)):
        if value is not None:
            body[key] = value
    body.update(queue_fields)
    if group:
        body["group_id"] = find_group(client, group, "--group")["id"]
    if properties:
        body["metadata"] = {key: value for key, _sep, value in (
            item.partition("=") for item in properties)}
        if any("=" not in item or item.startswith("=") for item in properties):
            raise click.BadParameter("expected KEY=VALUE", param_hint="--property")
    if dry_run:
        verdict = client.reserve(body, dry_run=True)
        if as_json:
            remote.print_json(verdict)
        else:
            remote.fields("dry run", views.dry_run_fields(verdict))
        remote.verdict_exit(verdict)
        return
    reservation = client.reserve(body, idempotency_key=idempotency_key)
    remote.accepted("reservation", reservation, as_json, watch_)
    if watch_:
        final = watch(client, reservation["id"], interval, show_bar=not as_json,
                      instances=as_json)
        if as_json:
            remote.print_json(final)
        else:
            _print_reservation({**final, "instances": None})
        _settled_exit(final)


@click.group("reservations")
def reservations() -> None:
    """List, show, watch and delete reservations."""


@reservations.command("list")
@remote.status_option("Only reservations in this status (any case).")
@remote.api_command
def list_(status, as_json):
    """List the project's reservations with their progress, newest first."""
    found = remote.client().list_reservations(status=status)
    if as_json:
        remote.print_json(found)
        return
    remote.listing("reservations", views.RESERVATION, found)


@reservations.command("show")
@click.argument("reservation_id")
@remote.api_command
def show(reservation_id, as_json):
    """Show a reservation and each of its instances."""
    reservation = remote.client().get_reservation(reservation_id)
    if as_json:
        remote.print_json(reservation)
    else:
        _print_reservation(reservation)


@reservations.command("watch")
@click.argument("reservation_id")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True)
@remote.api_command
def watch_command(reservation_id, interval, as_json):
    """Show a reservation's progress until it settles.

    Exit status 0 when it ends ACTIVE or DELETED, 4 when it ends otherwise, 5
    when it stops PAUSED.
    """
    final = watch(remote.client(), reservation_id, interval, show_bar=not as_json,
                  instances=as_json)
    if as_json:
        remote.print_json(final)
    _settled_exit(final)


@reservations.command("delete")
@click.argument("reservation_id")
@remote.api_command
def delete(reservation_id, as_json):
    """Delete a reservation: a teardown flow deletes every instance."""
    reservation = remote.client().delete_reservation(reservation_id)
    if as_json:
        remote.print_json(reservation)
    else:
        click.echo(f"reservation {reservation['id']} {reservation['status']}")
