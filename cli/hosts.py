"""``fleetflow hosts list|show|set-state|simulate`` (administrators).

::

    fleetflow --project admin --roles admin hosts list --status down
    fleetflow --project admin --roles admin hosts set-state z1-r1-h01 maintenance \\
        --reason "disk swap"
    fleetflow --project admin --roles admin hosts simulate z1-r1-h01 --dead
"""

from __future__ import annotations

import click

from fleetflow.cli import remote, views

# The API's host states (the CLI does not import server code).
HOST_STATES = ("up", "down", "maintenance", "disabled")


def _print_host(host: dict) -> None:
    remote.show(views.HOST, host)


@click.group("hosts")
def hosts() -> None:
    """List compute hosts, change their state, simulate failures (administrators)."""


@hosts.command("list")
@remote.status_option("Only hosts in this (effective) state, any case.", HOST_STATES,
                      state_alias=True)
@click.option("--region", help="Only hosts of this region.")
@click.option("--zone", help="Only hosts of this zone.")
@click.option("--rack", help="Only hosts of this rack.")
@remote.api_command
def list_(status, region, zone, rack, as_json):
    """List hosts with their effective state, instances and used/total capacity."""
    found = remote.client().list_hosts(state=status, region=region, zone=zone, rack=rack)
    if as_json:
        remote.print_json(found)
        return
    remote.listing("hosts", views.HOST, found)


@hosts.command("show")
@click.argument("name")
@remote.api_command
def show(name, as_json):
    """Show one host."""
    host = remote.client().get_host(name)
    if as_json:
        remote.print_json(host)
    else:
        _print_host(host)


@hosts.command("set-state")
@click.argument("name")
@click.argument("state", type=click.Choice(HOST_STATES))
@click.option("--reason", help="Why (shown with the host).")
@remote.api_command
def set_state(name, state, reason, as_json):
    """Set a host up, down (at once: a forced down), maintenance or disabled."""
    host = remote.client().update_host(name, state, reason=reason)
    if as_json:
        remote.print_json(host)
    else:
        click.echo(f"host {host['name']} {host['state']}")


@hosts.command("simulate")
@click.argument("name")
@click.option("--dead/--alive", "dead", default=None,
              help="Make the simulated host stop answering, or bring it back.")
@remote.api_command
def simulate(name, dead, as_json):
    """Kill or revive a simulated host (its agent must be simulated)."""
    if dead is None:
        raise click.UsageError("give --dead or --alive")
    answer = remote.client().simulate_host(name, dead)
    if as_json:
        # The host, like every host command, with the faults now injected into it.
        remote.print_json({**answer["host"], "faults": answer.get("faults")})
    else:
        host = answer["host"]
        click.echo(f"host {host['name']} {'dead' if dead else 'alive'} "
                   f"(state {host['state']})")
