"""``fleetflow evacuate`` and ``fleetflow evacuations list|show|watch|resume|skip|revert``.

::

    fleetflow --project admin --roles admin evacuate z1-r1-h01 --mode rebuild --watch
    fleetflow --project admin --roles admin evacuate z1-r1-h01 z1-r1-h02 --mode drain \\
        --fallback cold --target-host z1-r2-h01 --target-host z1-r2-h02 --dry-run
    fleetflow --project admin --roles admin evacuations skip e-... SERVER_UUID
"""

from __future__ import annotations

import time

import click
from rich.table import Table

from fleetflow.cli import remote, views

# The API's words (the CLI does not import server code).
MODES = ("rebuild", "live", "cold", "drain")
ON_ERROR = ("pause", "continue", "revert")
FALLBACKS = ("none", "cold")
STATUSES = ("PENDING", "RUNNING", "PAUSED", "DONE", "PARTIAL", "FAILED", "REVERTING",
            "REVERTED")
# Statuses after which an evacuation waits for nobody but an operator.
STOPPED = ("DONE", "PARTIAL", "FAILED", "REVERTED", "PAUSED")
PROGRESS_KEYS = views.EVACUATION_PROGRESS


def _fault(item: dict) -> str | None:
    fault = item.get("fault")
    return fault["code"] if fault else None


def moves_table(evacuation: dict) -> Table:
    """One row per server: where it goes and how far it got."""
    progress = evacuation.get("progress") or {}
    counts = "  ".join(f"{k} {progress[k]}" for k in PROGRESS_KEYS if k in progress)
    grid = Table(title=f"evacuation {evacuation['id']} {evacuation['status']}  {counts}")
    for column in ("id", "source", "destination", "status", "step", "attempts", "fault"):
        grid.add_column(column, overflow="fold")
    for item in evacuation.get("instances") or []:
        grid.add_row(*["" if v is None else str(v) for v in (
            item["id"], item.get("source"), item.get("destination"), item["status"],
            item.get("step"), item.get("attempts"), _fault(item))])
    return grid


def watch(client, evacuation_id: str, interval: float, live: bool = True) -> dict:
    """Poll until the evacuation stops (settled or paused); a live table meanwhile.

    Ctrl-C stops the watching only: the evacuation goes on.
    """
    with remote.interruptible("evacuation", evacuation_id, "evacuations watch"):
        return _watch(client, evacuation_id, interval, live)


def _watch(client, evacuation_id: str, interval: float, live: bool) -> dict:
    evacuation = client.get_evacuation(evacuation_id)
    if not live:
        while evacuation["status"] not in STOPPED:
            time.sleep(interval)
            evacuation = client.get_evacuation(evacuation_id)
        return evacuation
    with remote.live(moves_table(evacuation)) as view:
        while evacuation["status"] not in STOPPED:
            time.sleep(interval)
            evacuation = client.get_evacuation(evacuation_id)
            view.update(moves_table(evacuation), refresh=True)
    return evacuation


def _print_evacuation(evacuation: dict) -> None:
    remote.show(views.EVACUATION, evacuation)
    if evacuation.get("instances"):
        remote.console().print(moves_table(evacuation))


def _stopped_exit(evacuation: dict) -> None:
    remote.settled_exit(evacuation["status"], ("DONE",))


@click.command("evacuate")
@click.argument("hosts", nargs=-1, required=True)
@click.option("--mode", type=click.Choice(MODES), required=True,
              help="rebuild (dead hosts), live, cold, or drain (maintenance, then live).")
@click.option("--on-error", type=click.Choice(ON_ERROR), default="pause", show_default=True,
              help="What a server that cannot be moved does to the rest.")
@click.option("--max-parallel", type=click.IntRange(min=1), default=8, show_default=True,
              help="Moves under way at once.")
@click.option("--fallback", type=click.Choice(FALLBACKS), default="none", show_default=True,
              help="drain: cold-migrate servers that cannot go live.")
@click.option("--target-host", "target_hosts", multiple=True,
              help="An allowed destination (repeatable; default: any host that fits).")
@click.option("--reason", help="Why (kept with the evacuation).")
@click.option("--dry-run", is_flag=True,
              help="Only say where each server would go now (exit 3 when one cannot).")
@click.option("--watch", "watch_", is_flag=True,
              help="Show every server's move until the evacuation settles or pauses.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between polls with --watch.")
@remote.api_command
def evacuate(hosts, mode, on_error, max_parallel, fallback, target_hosts, reason, dry_run,
             watch_, interval, as_json):
    """Move every server off HOSTS as one durable evacuation.

    With --watch the exit status is 0 when the evacuation ends DONE, 4 when it
    ends otherwise (PARTIAL, FAILED, REVERTED), 5 when it pauses for an operator
    and 130 on Ctrl-C (the evacuation goes on). With --dry-run it is 0 when every server has a
    destination now and 3 when one does not.
    """
    client = remote.client()
    body: dict = {"hosts": list(hosts), "mode": mode, "on_error": on_error,
                  "max_parallel": max_parallel, "fallback": fallback}
    if target_hosts:
        body["target_hosts"] = list(target_hosts)
    if reason is not None:
        body["reason"] = reason
    if dry_run:
        verdict = client.evacuate(body, dry_run=True)
        if as_json:
            remote.print_json(verdict)
            remote.verdict_exit(verdict)
            return
        remote.table(f"dry run: {'fits' if verdict['fits'] else 'does not fit'}",
                     ["id", "tenant", "source", "destination", "explanation"],
                     [[i["id"], i.get("tenant_id"), i.get("source"), i.get("destination"),
                       i.get("explanation")] for i in verdict["instances"]])
        remote.verdict_exit(verdict)
        return
    evacuation = client.evacuate(body)
    remote.accepted("evacuation", evacuation, as_json, watch_)
    if watch_:
        final = watch(client, evacuation["id"], interval, live=not as_json)
        if as_json:
            remote.print_json(final)
        _stopped_exit(final)


@click.group("evacuations")
def evacuations() -> None:
    """List, show, watch and steer evacuations (administrators)."""


@evacuations.command("list")
@remote.status_option("Only evacuations in this status (any case).", STATUSES)
@click.option("--host", help="Only evacuations of this host.")
@remote.api_command
def list_(status, host, as_json):
    """List evacuations with their progress, newest first."""
    found = remote.client().list_evacuations(status=status, host=host)
    if as_json:
        remote.print_json(found)
        return
    remote.listing("evacuations", views.EVACUATION, found)


@evacuations.command("show")
@click.argument("evacuation_id")
@remote.api_command
def show(evacuation_id, as_json):
    """Show an evacuation and every server's move."""
    evacuation = remote.client().get_evacuation(evacuation_id)
    if as_json:
        remote.print_json(evacuation)
    else:
        _print_evacuation(evacuation)


@evacuations.command("watch")
@click.argument("evacuation_id")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True)
@remote.api_command
def watch_command(evacuation_id, interval, as_json):
    """Show every server's move until the evacuation settles or pauses.

    Exit status 0 when it ends DONE, 4 when it ends otherwise, 5 when it pauses.
    """
    final = watch(remote.client(), evacuation_id, interval, live=not as_json)
    if as_json:
        remote.print_json(final)
    _stopped_exit(final)


def _answer(evacuation: dict, as_json: bool) -> None:
    if as_json:
        remote.print_json(evacuation)
    else:
        click.echo(f"evacuation {evacuation['id']} {evacuation['status']}")


@evacuations.command("resume")
@click.argument("evacuation_id")
@remote.api_command
def resume(evacuation_id, as_json):
    """Try the failed and pending servers of a paused evacuation again."""
    _answer(remote.client().resume_evacuation(evacuation_id), as_json)


@evacuations.command("skip")
@click.argument("evacuation_id")
@click.argument("instance_ids", nargs=-1, required=True, metavar="UUID...")
@remote.api_command
def skip(evacuation_id, instance_ids, as_json):
    """Leave the named servers where they are and go on with the rest."""
    _answer(remote.client().skip_evacuation(evacuation_id, instance_ids), as_json)


@evacuations.command("revert")
@click.argument("evacuation_id")
@remote.api_command
def revert(evacuation_id, as_json):
    """End a paused evacuation where it stands (finished moves stay)."""
    _answer(remote.client().revert_evacuation(evacuation_id), as_json)
