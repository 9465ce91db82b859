"""``fleetflow recoveries list|show|watch|pause|resume|plan|projects|project``: automatic
recovery of dead hosts.

::

    fleetflow --project admin --roles admin recoveries list
    fleetflow --project admin --roles admin recoveries watch
    fleetflow --project admin --roles admin recoveries plan z1-r1-h01
    fleetflow --project admin --roles admin recoveries project demo --servers ha
"""

from __future__ import annotations

import time

import click

from fleetflow.cli import remote, views

# The API's words (the CLI does not import server code).
STATUSES = ("SUSPECT", "DEAD", "HELD", "FENCED", "EVACUATING", "FLAPPED", "CLEARED",
            "ABORTED", "DONE", "PARTIAL", "FAILED", "REVERTED")
BASE = "/v2/admin/recoveries"


@click.group("recoveries")
def recoveries() -> None:
    """Automatic recovery of dead hosts: its detections and its switch (administrators)."""


@recoveries.command("list")
@remote.status_option("Only recoveries in this status (any case).", STATUSES)
@click.option("--host", help="Only recoveries of this host.")
@remote.api_command
def list_(status, host, as_json):
    """List the monitor's detections, newest first."""
    client = remote.client()
    found = list(client.iterate(BASE, "recoveries", status=status, host=host))
    if as_json:
        remote.print_json(found)
        return
    click.echo(views.switch_text(client.get(BASE, limit=1)["recovery"]))
    remote.table("recoveries", list(views.RECOVERY.columns),
                 [views.RECOVERY.row(item) for item in found])


@recoveries.command("show")
@click.argument("recovery_id")
@remote.api_command
def show(recovery_id, as_json):
    """Show one recovery and its timeline."""
    recovery = remote.client().get(f"{BASE}/{recovery_id}")["recovery"]
    if as_json:
        remote.print_json(recovery)
        return
    remote.fields(views.RECOVERY.title(recovery), views.RECOVERY.fields(recovery))
    remote.table("timeline", list(views.TIMELINE_COLUMNS),
                 [views.timeline_row(e) for e in recovery["timeline"]])


@recoveries.command("watch")
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True)
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="Stop after this many looks (default: until Ctrl-C).")
@remote.api_command
def watch(interval, count, as_json):
    """Print each recovery whose status changes, as it changes, until Ctrl-C."""
    client = remote.client()
    seen: dict[str, str] = {}
    looks = 0
    try:
        while count is None or looks < count:
            for item in reversed(list(client.iterate(BASE, "recoveries", limit=100))):
                if seen.get(item["id"]) != item["status"]:
                    seen[item["id"]] = item["status"]
                    if as_json:
                        remote.print_json(item)
                    else:
                        click.echo(f"{item['id']} {item['host']} {item['status']} "
                                   f"{item.get('evacuation_id') or ''} "
                                   f"{item.get('detail') or ''}".rstrip())
            looks += 1
            if count is None or looks < count:
                time.sleep(interval)
    except KeyboardInterrupt:
        pass


def _set(action: str, reason: str | None, as_json: bool) -> None:
    body = {"recovery": {"reason": reason}} if reason else {}
    switch = remote.client().post(f"{BASE}/{action}", body)["recovery"]
    if as_json:
        remote.print_json(switch)
    else:
        click.echo(views.switch_text(switch))


@recoveries.command("pause")
@click.option("--reason", default=None, help="Why (a maintenance window ...).")
@remote.api_command
def pause(reason, as_json):
    """Stop automatic fencing and evacuation cluster-wide; detection goes on."""
    _set("pause", reason, as_json)


@recoveries.command("resume")
@click.option("--reason", default=None)
@remote.api_command
def resume(reason, as_json):
    """Let the monitor act again."""
    _set("resume", reason, as_json)


@recoveries.command("plan")
@click.argument("host")
@remote.api_command
def plan(host, as_json):
    """What a recovery of HOST would do if it died now (a dry run)."""
    found = remote.client().get(f"/v2/admin/hosts/{host}/recovery-plan")["recovery_plan"]
    if as_json:
        remote.print_json(found)
        return
    click.echo(f"host {found['host']} (zone {found['zone']}): where {found['where']}, "
               f"{'fits' if found['fits'] else 'does NOT fit'}")
    remote.table("moves", ["id", "destination", "explanation"], [
        [i["id"], i.get("destination"), i.get("explanation")] for i in found["instances"]])
    if found["staying"]:
        remote.table("staying", ["id", "why"], [[s["id"], s["why"]] for s in found["staying"]])


PROJECT_COLUMNS = ["project_id", "servers", "reason", "user_id", "updated_at"]


@recoveries.command("projects")
@remote.api_command
def projects(as_json):
    """List the projects whose servers are chosen otherwise than [recovery] servers."""
    found = remote.client().get(f"{BASE}/projects")["projects"]
    if as_json:
        remote.print_json(found)
        return
    remote.table("projects", PROJECT_COLUMNS,
                 [[p.get(c) for c in PROJECT_COLUMNS] for p in found])


@recoveries.command("project")
@click.argument("project_id")
@click.option("--servers", type=click.Choice(["all", "ha", "none"]), default=None,
              help="Which of its servers a recovery moves (ha: metadata ha=true only).")
@click.option("--default", "clear", is_flag=True,
              help="Drop the project's choice: [recovery] servers applies again.")
@click.option("--reason", default=None)
@remote.api_command
def project(project_id, servers, clear, reason, as_json):
    """Show or set which servers of PROJECT_ID a recovery moves."""
    client = remote.client()
    path = f"{BASE}/projects/{project_id}"
    if servers and clear:
        raise click.UsageError("give --servers or --default, not both")
    if servers:
        found = client.put(path, {"project": {"servers": servers, "reason": reason}})
    elif clear:
        found = client.delete(path)
    else:
        found = client.get(path)
    found = found["project"]
    if as_json:
        remote.print_json(found)
    else:
        origin = " ([recovery] servers)" if found.get("default") else ""
        click.echo(f"project {found['project_id']}: servers {found['servers']}{origin}")
