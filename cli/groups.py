"""``fleetflow groups create|list|show|update|delete``: server groups."""

from __future__ import annotations

import click

from fleetflow.api.client import FleetflowApiError
from fleetflow.cli import remote, views

POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity",
            "network-proximity", "host-capabilities")


def find_group(client, ref: str, param_hint: str = "GROUP") -> dict:
    """The group whose id or name is ``ref`` (names need not be unique: then give the id)."""
    try:
        return client.get_group(ref)
    except FleetflowApiError as exc:
        if exc.status not in (400, 404):
            raise
        not_found = exc
    found = client.list_groups(name=ref)
    if not found:
        raise not_found
    if len(found) > 1:
        raise click.BadParameter(f"{len(found)} groups are named {ref!r}; give its id",
                                 param_hint=param_hint)
    return found[0]


def _print_group(group: dict) -> None:
    remote.show(views.GROUP, group)


def _emit(group: dict, as_json: bool) -> None:
    if as_json:
        remote.print_json(group)
    else:
        _print_group(group)


@click.group("groups")
def groups() -> None:
    """Server groups: placement rules (anti-affinity ...) shared by instances."""


@groups.command("create")
@click.option("--name", help="A name (need not be unique).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES),
              help="Placement rule; repeatable.")
@click.option("--scope", type=click.Choice(["host", "rack", "zone"]), default="host",
              show_default=True, help="Where (anti-)affinity applies.")
@click.option("--max-per-host", type=click.IntRange(min=1), help="Members per host at most.")
@click.option("--meta", "metadata", multiple=True, metavar="KEY=VALUE",
              help="Metadata; repeatable.")
@click.option("--capability", "capabilities", multiple=True, metavar="KEY=VALUE",
              help="Capability every member's host must have (host-capabilities); "
                   "repeatable.")
@remote.api_command
def create(name, policies, scope, max_per_host, metadata, capabilities, as_json):
    """Create an empty group; instances join it through a reservation's --group."""
    body = {"policies": list(policies), "scope": scope,
            "metadata": remote.key_values(metadata, "--meta"),
            "capabilities": remote.key_values(capabilities, "--capability")}
    if name is not None:
        body["name"] = name
    if max_per_host is not None:
        body["max_per_host"] = max_per_host
    _emit(remote.client().create_group(body), as_json)


@groups.command("list")
@click.option("--name", help="Only groups of this name.")
@remote.api_command
def list_(name, as_json):
    """List the project's groups."""
    found = remote.client().list_groups(name=name)
    if as_json:
        remote.print_json(found)
        return
    remote.listing("groups", views.GROUP, found)


@groups.command("show")
@click.argument("group")
@remote.api_command
def show(group, as_json):
    """Show one group (by id or name) with its members."""
    _emit(find_group(remote.client(), group), as_json)


@groups.command("update")
@click.argument("group")
@click.option("--name", help="New name.")
@click.option("--meta", "metadata", multiple=True, metavar="KEY=VALUE",
              help="Replace the metadata with these pairs; repeatable.")
@click.option("--clear-meta", is_flag=True, help="Remove all metadata.")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES),
              help="Replace the policies (only while the group is empty).")
@click.option("--clear-policies", is_flag=True, help="No policy (only while empty).")
@click.option("--max-per-host", type=click.IntRange(min=1),
              help="Members per host at most (only while empty).")
@remote.api_command
def update(group, name, metadata, clear_meta, policies, clear_policies, max_per_host,
           as_json):
    """Change a group's (id or name) name or metadata at any time; rules only while
    it is empty."""
    changes: dict = {}
    if name is not None:
        changes["name"] = name
    if metadata or clear_meta:
        changes["metadata"] = remote.key_values(metadata, "--meta")
    if policies or clear_policies:
        changes["policies"] = list(policies)
    if max_per_host is not None:
        changes["max_per_host"] = max_per_host
    if not changes:
        raise click.UsageError("nothing to change: give --name, --meta, --policy ...")
    client = remote.client()
    _emit(client.update_group(find_group(client, group)["id"], changes), as_json)


@groups.command("delete")
@click.argument("group")
@remote.api_command
def delete(group, as_json):
    """Delete an empty group (by id or name); --json prints it as it was."""
    client = remote.client()
    found = find_group(client, group)
    client.delete_group(found["id"])
    if as_json:
        remote.print_json(found)
    else:
        click.echo(f"group {found['id']} deleted")
