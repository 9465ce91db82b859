"""``fleetflow servers list|show|delete``: instances one by one."""

from __future__ import annotations

import click

from fleetflow.cli import remote


def _fault(server: dict) -> str | None:
    fault = server.get("fault")
    return f"{fault['code']}: {fault['message']}" if fault else None


@click.group("servers")
def servers() -> None:
    """List, show and delete servers (instances)."""


@servers.command("list")
@click.option("--reservation", "reservation_id", help="Only the servers of this reservation.")
@remote.status_option("Only servers in this status, any case (DELETED ones only this way).")
@click.option("--host", help="Only servers on this host (administrators).")
@remote.api_command
def list_(reservation_id, status, host, as_json):
    """List the project's servers."""
    found = remote.client().list_servers(reservation_id=reservation_id, status=status,
                                         host=host)
    if as_json:
        remote.print_json(found)
        return
    remote.table("servers", ["id", "name", "status", "task_state", "host", "reservation",
                             "attempts", "fault"],
                 [[s["id"], s["name"], s["status"], s.get("task_state"), s.get("host"),
                   s.get("reservation_id"), s.get("attempts"), _fault(s)] for s in found])


@servers.command("show")
@click.argument("server_id")
@remote.api_command
def show(server_id, as_json):
    """Show one server: host, attempts, hosts tried, fault."""
    server = remote.client().get_server(server_id)
    if as_json:
        remote.print_json(server)
        return
    remote.fields(f"server {server['id']}", [
        (key, server.get(key)) for key in ("name", "status", "task_state", "host",
                                           "reservation_id", "group_id", "flavor_id",
                                           "image_id", "attempts", "hosts_tried",
                                           "created_at", "updated_at")
    ] + [("fault", _fault(server))])


@servers.command("delete")
@click.argument("server_id")
@remote.api_command
def delete(server_id, as_json):
    """Delete one server (frees its allocation and group membership)."""
    server = remote.client().delete_server(server_id)
    if as_json:
        remote.print_json(server)
    else:
        click.echo(f"server {server['id']} {server['status']}")
