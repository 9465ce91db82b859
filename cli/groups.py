"""``fleetflow groups create|list|show|update|delete``: server groups (seed 003)."""

from __future__ import annotations

import click

from fleetflow.cli import remote

POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity",
            "network-proximity", "host-capabilities")


def _print_group(group: dict) -> None:
    remote.fields(f"group {group['id']}", [
        (key, group.get(key)) for key in ("name", "tenant_id", "policies", "scope",
                                          "max_per_host", "metadata", "capabilities",
                                          "members", "created_at", "updated_at")])


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
@remote.json_option
@remote.api_errors
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
@remote.json_option
@remote.api_errors
def list_(name, as_json):
    """List the project's groups."""
    found = remote.client().list_groups(name=name)
    if as_json:
        remote.print_json(found)
        return
    remote.table("groups", ["id", "name", "policies", "scope", "max_per_host", "members"],
                 [[g["id"], g.get("name"), ", ".join(g["policies"]), g["scope"],
                   g.get("max_per_host"), len(g["members"])] for g in found])


@groups.command("show")
@click.argument("group_id")
@remote.json_option
@remote.api_errors
def show(group_id, as_json):
    """Show one group with its members."""
    _emit(remote.client().get_group(group_id), as_json)


@groups.command("update")
@click.argument("group_id")
@click.option("--name", help="New name.")
@click.option("--meta", "metadata", multiple=True, metavar="KEY=VALUE",
              help="Replace the metadata with these pairs; repeatable.")
@click.option("--clear-meta", is_flag=True, help="Remove all metadata.")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES),
              help="Replace the policies (only while the group is empty).")
@click.option("--clear-policies", is_flag=True, help="No policy (only while empty).")
@click.option("--max-per-host", type=click.IntRange(min=1),
              help="Members per host at most (only while empty).")
@remote.json_option
@remote.api_errors
def update(group_id, name, metadata, clear_meta, policies, clear_policies, max_per_host,
           as_json):
    """Change name or metadata at any time; rules only while the group is empty."""
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
    _emit(remote.client().update_group(group_id, changes), as_json)


@groups.command("delete")
@click.argument("group_id")
@remote.json_option
@remote.api_errors
def delete(group_id, as_json):
    """Delete an empty group."""
    remote.client().delete_group(group_id)
    if as_json:
        remote.print_json({"deleted": group_id})
    else:
        click.echo(f"group {group_id} deleted")
