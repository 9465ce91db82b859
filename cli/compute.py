"""``fleetflow compute-agent``: serve simulated compute hosts over oslo.messaging."""

from __future__ import annotations

import signal
import threading

import click


@click.command("compute-agent")
@click.option("--hosts", "host_list", default=None,
              help="Comma-separated host names; one RPC server per host, addressed by name.")
@click.option("--all", "all_hosts", is_flag=True,
              help="Serve every host of the database from one RPC server.")
@click.option("--transport-url", default=None,
              help="oslo.messaging URL (default: [messaging] transport_url).")
@click.option("--server-name", default=None,
              help="RPC server name with --all (default: <machine name>-compute).")
@click.pass_obj
def compute_agent(conf, host_list: str | None, all_hosts: bool, transport_url: str | None,
                  server_name: str | None) -> None:
    """Serve compute hosts until SIGTERM or SIGINT.

    Hosts and their inventories come from the database; guests live in
    [compute] state_path, so an agent killed and started again finds them.
    """
    from fleetflow.compute import agent as compute_agent_mod
    from fleetflow.persistence.db import Database

    hosts = [h.strip() for h in (host_list or "").split(",") if h.strip()]
    if bool(hosts) == all_hosts:
        raise click.UsageError("give exactly one of --hosts h1,h2 or --all")
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
                                        per_host=not all_hosts, server_name=server_name)
    except Exception as exc:
        database.dispose()
        raise click.ClickException(str(exc)) from exc
    if not conf.messaging.transport_url.startswith(("rabbit", "kombu+amqp", "amqp")):
        click.echo(f"warning: transport {conf.messaging.transport_url} does not leave this "
                   "process; give --transport-url rabbit://... to be reachable", err=True)
    click.echo(f"compute agent {agent.agent_name}: serving {len(agent.driver.hosts)} hosts "
               f"on topic {conf.messaging.topic}", err=True)
    try:
        # wait() with a timeout so the main thread keeps handling signals.
        while not stop.wait(0.5):
            pass
    finally:
        agent.stop()
        database.dispose()
        click.echo("compute agent stopped", err=True)
