"""``fleetflow flows list|show|resume|revert``: the operator's view of the engine.

::

    fleetflow flows list --state PAUSED
    fleetflow flows show 3f0c...          # every atom, and the failure
    fleetflow flows resume 3f0c...        # re-run from the checkpoint
    fleetflow flows revert 3f0c...        # undo what it did

Through the REST API (``/v2/admin/flows``). These are operator verbs, so, as
``fleetflow audit`` does, the API is called as an administrator: ``--project``
defaults to ``admin`` and, unless ``--roles`` or ``--token`` is given, the role
is ``admin``.
"""

from __future__ import annotations

import click

from fleetflow.api.client import Client
from fleetflow.cli import remote

# The API's flow states (the CLI does not import server code).
STATES = ("PENDING", "RUNNING", "SUCCESS", "FAILURE", "REVERTED", "SUSPENDED", "SUSPENDING",
          "RESUMING", "REVERTING", "PAUSED")


def admin_client() -> Client:
    """The client of the command line, as an administrator unless told otherwise."""
    return remote.admin_client()


def _failure_text(failure: dict | None) -> str | None:
    if not failure:
        return None
    return f"{failure['step']}: {failure['type']}: {failure['message']}"


def _print_flow(flow: dict) -> None:
    remote.fields(f"flow {flow['id']}", [
        ("name", flow["name"]), ("state", flow["state"]),
        ("owner_tenant", flow.get("owner_tenant")), ("on_error", flow.get("on_error")),
        ("submitted_at", flow.get("submitted_at")), ("paused_at", flow.get("paused_at")),
        ("last_progress_at", flow.get("last_progress_at")),
        ("failure", _failure_text(flow.get("failure")))])
    atoms = flow.get("atoms") or []
    if atoms:
        remote.table("atoms", ["name", "kind", "state", "intention", "attempts", "failure"], [
            [a["name"], a["kind"], a["state"], a["intention"], a["attempts"],
             _failure_text(a.get("failure") or a.get("revert_failure"))] for a in atoms])


@click.group("flows")
def flows() -> None:
    """List, show, resume and revert flows (administrators)."""


@flows.command("list")
@click.option("--state", type=click.Choice(STATES, case_sensitive=False),
              help="Only flows in this state (PAUSED: stopped on error for an operator).")
@click.option("--tenant", help="Only this owner tenant's flows.")
@remote.api_command
def list_cmd(state, tenant, as_json) -> None:
    """List flows, sorted by id."""
    found = admin_client().list_flows(state=state.upper() if state else None, tenant=tenant)
    if as_json:
        remote.print_json(found)
        return
    remote.table(f"{len(found)} flows",
                 ["id", "name", "state", "owner_tenant", "on_error", "submitted_at",
                  "last_progress_at"],
                 [[f["id"], f["name"], f["state"], f.get("owner_tenant"), f.get("on_error"),
                   f.get("submitted_at"), f.get("last_progress_at")] for f in found])


@flows.command("show")
@click.argument("flow_id")
@remote.api_command
def show_cmd(flow_id, as_json) -> None:
    """Show a flow: every atom's state, intention, attempts and failure."""
    flow = admin_client().get_flow(flow_id)
    if as_json:
        remote.print_json(flow)
    else:
        _print_flow(flow)


def _act(action: str, flow_id: str, as_json: bool) -> None:
    client = admin_client()
    flow = client.resume_flow(flow_id) if action == "resume" else client.revert_flow(flow_id)
    if as_json:
        remote.print_json(flow)
    else:
        click.echo(f"flow {flow['id']} {action} accepted; now {flow['state']} "
                   f"(a conductor picks it up)")


@flows.command("resume")
@click.argument("flow_id")
@remote.api_command
def resume_cmd(flow_id, as_json) -> None:
    """Resume a stopped flow (crashed, suspended, paused on error) from its checkpoint."""
    _act("resume", flow_id, as_json)


@flows.command("revert")
@click.argument("flow_id")
@remote.api_command
def revert_cmd(flow_id, as_json) -> None:
    """Revert a paused, suspended or failed flow."""
    _act("revert", flow_id, as_json)
