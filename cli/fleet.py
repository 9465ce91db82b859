"""``fleetflow fleet``: load a fleet file into the database, generate a large one, or
sync the rows from a real cloud."""

from __future__ import annotations

import sys

import click
import yaml


@click.group()
def fleet() -> None:
    """Hosts, storage and catalogs of the cloud."""


@fleet.command("load")
@click.argument("path", required=False, type=click.Path(exists=True, dir_okay=False))
@click.pass_obj
def load_cmd(conf, path: str | None) -> None:
    """Register the hosts of PATH (the shipped default fleet when omitted)."""
    from fleetflow.persistence import fleet as fleet_file
    from fleetflow.persistence.db import Database

    database = Database.from_conf(conf)
    database.upgrade()
    expanded = fleet_file.expand(fleet_file.read(path))
    with database.session() as session:
        added = fleet_file.load(session, expanded)
    click.echo(f"{len(expanded.hosts)} hosts ({added['hosts']} new), "
               f"{len(expanded.storage)} storage backends, {len(expanded.flavors)} flavors, "
               f"{len(expanded.images)} images")


@fleet.command("sync")
@click.pass_obj
def sync_cmd(conf) -> None:
    """Mirror the OpenStack cloud's hosts, flavors, images and usage into the rows.

    Needs [cloud] driver = openstack (exit 2 otherwise).
    """
    from rich.console import Console

    from fleetflow.common.exceptions import InvalidInput
    from fleetflow.persistence.db import Database
    from fleetflow.services import sync as cloud_sync

    ctx = click.get_current_context()
    if conf.cloud.driver != "openstack":
        click.echo(f"fleet sync: [cloud] driver is {conf.cloud.driver!r}, not openstack: "
                   "there is no cloud to sync", err=True)
        ctx.exit(2)
    database = Database.from_conf(conf)
    database.upgrade()
    try:
        counts = cloud_sync.sync(conf, database)
    except InvalidInput as exc:  # no cloud named, or clouds.yaml does not know it
        click.echo(f"fleet sync: {exc}", err=True)
        ctx.exit(2)
    except Exception as exc:  # noqa: BLE001 - the cloud refused or could not be reached
        raise click.ClickException(f"fleet sync: {exc}") from None
    Console(highlight=False).print(
        f"synced {counts['hosts']} hosts ({counts['up']} up, {counts['down']} down), "
        f"{counts['flavors']} flavors, {counts['images']} images from cloud "
        f"[bold]{counts['cloud']}[/bold]")


@fleet.command("generate")
@click.option("--hosts", type=click.IntRange(min=1), required=True, help="Number of hosts.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for which racks get GPUs and stickers.")
@click.option("--hosts-per-rack", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="File to write (standard output when omitted).")
def generate_cmd(hosts: int, seed: int, hosts_per_rack: int, output: str | None) -> None:
    """Write a fleet file of HOSTS hosts in two regions."""
    from fleetflow.persistence import fleet as fleet_file

    doc = fleet_file.generate(hosts, seed=seed, hosts_per_rack=hosts_per_rack)
    text = yaml.safe_dump(doc, sort_keys=False)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
        click.echo(f"wrote {hosts} hosts to {output}", err=True)
    else:
        sys.stdout.write(text)
