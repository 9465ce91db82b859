"""The ``fleetflow`` command."""

from __future__ import annotations

import warnings

import click

import fleetflow
from fleetflow.cli import audit as audit_cmd
from fleetflow.cli import capacity as capacity_cmd
from fleetflow.cli import catalog as catalog_cmd
from fleetflow.cli import compute as compute_cmd
from fleetflow.cli import conductor as conductor_cmd
from fleetflow.cli import db as db_cmd
from fleetflow.cli import evacuations as evacuations_cmd
from fleetflow.cli import fleet as fleet_cmd
from fleetflow.cli import flows as flows_cmd
from fleetflow.cli import groups as groups_cmd
from fleetflow.cli import hosts as hosts_cmd
from fleetflow.cli import queue as queue_cmd
from fleetflow.cli import recoveries as recoveries_cmd
from fleetflow.cli import remote
from fleetflow.cli import reservations as reservations_cmd
from fleetflow.cli import serve as serve_cmd
from fleetflow.cli import servers as servers_cmd
from fleetflow.cli import vclusters as vclusters_cmd
from fleetflow.cli import volumes as volumes_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             epilog=remote.ENVIRONMENT_HELP + "\n\n" + remote.EXIT_STATUS_HELP)
@click.version_option(fleetflow.__version__, prog_name="fleetflow",
                      message="%(prog)s %(version)s")
@click.option("--config-file", "config_files", multiple=True, type=click.Path(dir_okay=False),
              help="oslo.config file; may be given more than once.")
@remote.global_options
@click.pass_context
def cli(ctx: click.Context, config_files: tuple[str, ...]) -> None:
    """fleetflow: durable task graphs for a compute cloud."""
    from fleetflow.common import config

    args: list[str] = []
    for path in config_files:
        args += ["--config-file", path]
    ctx.obj = config.load(args=args)


cli.add_command(db_cmd.db)
cli.add_command(fleet_cmd.fleet)
cli.add_command(compute_cmd.compute_agent)
cli.add_command(conductor_cmd.conductor)
cli.add_command(reservations_cmd.reserve)
cli.add_command(reservations_cmd.reservations)
cli.add_command(servers_cmd.servers)
cli.add_command(groups_cmd.groups)
cli.add_command(serve_cmd.serve)
cli.add_command(recoveries_cmd.recoveries)
cli.add_command(audit_cmd.audit_cmd)
cli.add_command(capacity_cmd.capacity_cmd)
cli.add_command(flows_cmd.flows)
cli.add_command(queue_cmd.queue_cmd)
cli.add_command(hosts_cmd.hosts)
cli.add_command(evacuations_cmd.evacuate)
cli.add_command(evacuations_cmd.evacuations)
cli.add_command(vclusters_cmd.vclusters)
cli.add_command(volumes_cmd.volumes)
cli.add_command(catalog_cmd.quotas)
cli.add_command(catalog_cmd.flavors)
cli.add_command(catalog_cmd.images)


def main() -> None:
    # TaskFlow imports eventlet through oslo.service; we never monkey-patch,
    # so its deprecation notice says nothing to an operator.
    warnings.filterwarnings("ignore", message=r"(?is).*eventlet")
    cli(prog_name="fleetflow")


if __name__ == "__main__":  # python -m fleetflow.cli.main: how serve starts its agents
    main()
