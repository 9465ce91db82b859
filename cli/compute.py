"""``fleetflow compute-agent``: serve simulated compute hosts over oslo.messaging."""

from __future__ import annotations

import signal
import sys
import threading

import click

from fleetflow.cli.startup import check_config, start_metrics
from fleetflow.common import gc_policy, switching


@click.command("compute-agent")
@click.option("--hosts", "host_list", default=None,
              help="Comma-separated host names; one RPC server per host, addressed by name.")
@click.option("--all", "all_hosts", is_flag=True,
              help="Serve every host of the database from one RPC server.")
@click.option("--transport-url", default=None,
              help="oslo.messaging URL (default: [messaging] transport_url).")
@click.option("--server-name", default=None,
              help="RPC server name with --all (default: <machine name>-compute).")
@click.option("--shard", default=None, metavar="K/N",
              help="With --all: serve only shard K of N (agents 0/N .. N-1/N share the hosts).")
@click.option("--exit-with-parent", is_flag=True,
              help="Print 'serving' once serving, and stop when stdin closes (the parent "
                   "process ended); how 'fleetflow serve' runs its agents.")
@click.pass_obj
def compute_agent(conf, host_list: str | None, all_hosts: bool, transport_url: str | None,
                  server_name: str | None, shard: str | None, exit_with_parent: bool) -> None:
    """Serve compute hosts until SIGTERM or SIGINT.

    Hosts and their inventories come from the database; guests live in
    [compute] state_path, so an agent killed and started again finds them.
    """
    from fleetflow.compute import agent as compute_agent_mod
    from fleetflow.persistence.db import Database

    check_config(conf)
    hosts = [h.strip() for h in (host_list or "").split(",") if h.strip()]
    if bool(hosts) == all_hosts:
        raise click.UsageError("give exactly one of --hosts h1,h2 or --all")
    shard_of = _parse_shard(shard) if shard else None
    if shard_of and not all_hosts:
        raise click.UsageError("--shard goes with --all")
    if transport_url:
        conf.set_override("transport_url", transport_url, group="messaging")

    stop = threading.Event()
    # NOTE: handlers are set before serving so a SIGTERM arriving during
    # start-up still stops cleanly instead of killing us mid-write.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    database = Database.from_conf(conf)
    try:
        agent = compute_agent_mod.serve(conf, database, hosts=hosts or None,
                                        per_host=not all_hosts, server_name=server_name,
                                        shard=shard_of)
    except Exception as exc:
        database.dispose()
        raise click.ClickException(str(exc)) from exc
    if not conf.messaging.transport_url.startswith(("rabbit", "kombu+amqp", "amqp",
                                                    "fleetflow-ipc")):
        click.echo(f"warning: transport {conf.messaging.transport_url} does not leave this "
                   "process; give --transport-url rabbit://... to be reachable", err=True)
    click.echo(f"compute agent {agent.agent_name}: serving {len(agent.driver.hosts)} hosts "
               f"on topic {conf.messaging.topic}", err=True)
    try:
        metrics_server = start_metrics(conf, database)
    except click.ClickException:
        agent.stop()
        database.dispose()
        raise
    gc_policy.for_service()
    switching.for_service(conf)
    if exit_with_parent:
        click.echo("serving")
        sys.stdout.flush()
        threading.Thread(target=_stop_at_end_of_stdin, args=(stop,), daemon=True).start()
    try:
        # wait() with a timeout so the main thread keeps handling signals.
        while not stop.wait(0.5):
            pass
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
        agent.stop()
        database.dispose()
        click.echo("compute agent stopped", err=True)


def _parse_shard(value: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected K/N, e.g. 0/2",
                                 param_hint="--shard") from None
    if not 0 <= index < count:
        raise click.BadParameter(f"{value!r}: K must be in 0 .. N-1", param_hint="--shard")
    return index, count


def _stop_at_end_of_stdin(stop: threading.Event) -> None:
    # Only the parent holds the other end: end of file means it is gone.
    while sys.stdin.read(4096):
        pass
    stop.set()
