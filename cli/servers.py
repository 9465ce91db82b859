"""``fleetflow servers list|show|set|unset|delete``: instances one by one."""

from __future__ import annotations

import click

from fleetflow.api.client import where
from fleetflow.cli import remote


def _fault(server: dict) -> str | None:
    fault = server.get("fault")
    return f"{fault['code']}: {fault['message']}" if fault else None


@click.group("servers")
def servers() -> None:
    """List, show and delete servers (instances); set and unset their metadata."""


@servers.command("list")
@click.option("--reservation", "reservation_id", help="Only the servers of this reservation.")
@remote.status_option("Only servers in this status, any case (DELETED ones only this way).")
@click.option("--host", help="Only servers on this host (administrators).")
@click.option("--all-projects", is_flag=True,
              help="The servers of every project (administrators).")
@click.option("--in-project", "project_id",
              help="The servers of this project, whichever the identity's own is "
                   "(administrators; implies --all-projects' list).")
@remote.api_command
def list_(reservation_id, status, host, all_projects, project_id, as_json):
    """List the project's servers, or every project's (--all-projects)."""
    # NOTE: not --project, which is the identity's project after a subcommand too.
    all_projects = all_projects or project_id is not None
    filters = {"reservation_id": reservation_id, "status": status, "host": host}
    client = remote.client()
    found = client.list_all_servers(project_id=project_id, **filters) if all_projects \
        else client.list_servers(**filters)
    if as_json:
        remote.print_json(found)
        return
    columns = ["id", "name", "status", "task_state", "host", "reservation", "attempts",
               "fault"]
    rows = [[s["id"], s["name"], s["status"], s.get("task_state"), where(s),
             s.get("reservation_id"), s.get("attempts"), _fault(s)] for s in found]
    if all_projects:
        columns.insert(1, "project")
        for row, server in zip(rows, found, strict=True):
            row.insert(1, server.get("tenant_id"))
    remote.table("servers", columns, rows)


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
                                           "host_id", "reservation_id", "group_id", "flavor_id",
                                           "image_id", "attempts", "hosts_tried",
                                           "created_at", "updated_at")
    ] + [("fault", _fault(server)), ("metadata", _properties(server.get("metadata")))])


def _properties(metadata: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((metadata or {}).items()))


def _pair(ctx, param, values) -> dict:
    pairs = {}
    for value in values:
        key, sep, item = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r}: give KEY=VALUE", ctx, param)
        pairs[key] = item
    return pairs


@servers.command("set")
@click.argument("server_id")
@click.option("--property", "properties", multiple=True, callback=_pair, metavar="KEY=VALUE",
              help="A metadata item to add or change (repeat it). ha=true, recovery=never "
                   "and recovery_priority=N steer automatic recovery.")
@click.option("--no-property", is_flag=True,
              help="Remove every other item first (the metadata becomes the --property "
                   "items only).")
@remote.api_command
def set_(server_id, properties, no_property, as_json):
    """Set metadata items of a server (as 'openstack server set --property')."""
    if not properties and not no_property:
        raise click.UsageError("nothing to set: give --property KEY=VALUE")
    metadata = remote.client().update_server_metadata(server_id, properties,
                                                      replace=no_property)
    if as_json:
        remote.print_json(metadata)
    else:
        click.echo(f"server {server_id}: {_properties(metadata) or 'no metadata'}")


@servers.command("unset")
@click.argument("server_id")
@click.option("--property", "keys", multiple=True, required=True, metavar="KEY",
              help="A metadata key to remove (repeat it).")
@remote.api_command
def unset(server_id, keys, as_json):
    """Remove metadata items of a server."""
    client = remote.client()
    for key in keys:
        client.delete_server_metadata(server_id, key)
    metadata = client.get_server(server_id).get("metadata") or {}
    if as_json:
        remote.print_json(metadata)
    else:
        click.echo(f"server {server_id}: {_properties(metadata) or 'no metadata'}")


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
