"""``fleetflow flows list|show|resume|revert``: the operator's view of the engine.

::

    fleetflow flows list --status paused
    fleetflow flows show 3f0c...          # every atom, and the failure
    fleetflow flows show 3f0c... --graph  # how they nest (--format dot: Graphviz)
    fleetflow flows resume 3f0c...        # re-run from the checkpoint
    fleetflow flows revert 3f0c...        # undo what it did

Through the REST API. As ``fleetflow audit`` does, the API is called as an
administrator (``/v2/admin/flows``): ``--project`` defaults to ``admin`` and,
unless ``--roles`` or ``--token`` is given, the role is ``admin``. Roles given
without ``admin`` are a member's: ``list`` and ``show`` then read the project's
own flows (``/v2/{project}/flows``); resume and revert stay operator verbs.
"""

from __future__ import annotations

import click

from fleetflow.api.client import Client
from fleetflow.cli import remote, views

# The API's flow states (the CLI does not import server code).
STATES = ("PENDING", "RUNNING", "SUCCESS", "FAILURE", "REVERTED", "SUSPENDED", "SUSPENDING",
          "RESUMING", "REVERTING", "PAUSED")


def admin_client() -> Client:
    """The client of the command line, as an administrator unless told otherwise."""
    return remote.admin_client()


def _as_member() -> bool:
    given = remote.settings()
    return given.roles_given and "admin" not in {r.strip() for r in given.roles.split(",")}


def _print_flow(flow: dict) -> None:
    remote.show(views.FLOW, flow)
    atoms = flow.get("atoms") or []
    if atoms:
        remote.table("atoms", list(views.ATOM_COLUMNS), [views.atom_row(a) for a in atoms])


@click.group("flows")
def flows() -> None:
    """List and show flows (members: their project's), resume and revert them (admins)."""


@flows.command("list")
@remote.status_option("Only flows in this state, any case (PAUSED: stopped on error for "
                      "an operator).", STATES, state_alias=True)
@click.option("--tenant", help="Only this owner tenant's flows.")
@remote.api_command
def list_cmd(status, tenant, as_json) -> None:
    """List flows, newest first."""
    if _as_member():
        if tenant:
            raise click.UsageError("--tenant is for administrators: a member lists the "
                                   "project's own flows")
        found = remote.client().list_project_flows(state=status)
    else:
        found = admin_client().list_flows(state=status, tenant=tenant)
    if as_json:
        remote.print_json(found)
        return
    remote.listing(f"{len(found)} flows", views.FLOW, found)


def _show_graph(flow_id: str, output: str, as_json: bool) -> None:
    graph = (remote.client().get_project_flow_graph(flow_id) if _as_member()
             else admin_client().get_flow_graph(flow_id))
    if as_json:
        remote.print_json(graph)
    elif output == "dot":
        click.echo(views.graph_dot(graph), nl=False)
    else:
        click.echo(f"flow {graph['id']} {graph['name']} {graph['state']}"
                   + (f" (fence {graph['fence']}, {graph['owner']})"
                      if graph.get("fence") is not None else ""))
        click.echo("\n".join(views.graph_lines(graph["root"])))


@flows.command("show")
@click.argument("flow_id")
@click.option("--graph", "as_graph", is_flag=True,
              help="Show the flow's structure: nested flows, retries and atoms as a tree.")
@click.option("--format", "output", type=click.Choice(("tree", "dot")), default="tree",
              show_default=True, help="With --graph: an indented tree, or Graphviz' DOT "
                                      "(fleetflow flows show ID --graph --format dot | "
                                      "dot -Tsvg > flow.svg).")
@remote.api_command
def show_cmd(flow_id, as_graph, output, as_json) -> None:
    """Show a flow: every atom's state, intention, attempts and failure (--graph: how
    they nest)."""
    if output != "tree" and not as_graph:
        raise click.UsageError("--format is for --graph")
    if as_graph:
        _show_graph(flow_id, output, as_json)
        return
    flow = (remote.client().get_project_flow(flow_id) if _as_member()
            else admin_client().get_flow(flow_id))
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
