"""``fleetflow vclusters create|list|show|add|remove|rename|delete|watch``.

::

    fleetflow --project p1 vclusters create -f cluster.json --watch
    fleetflow --project p1 vclusters create -f cluster.xml --name db --dry-run
    fleetflow --project p1 vclusters add vc-... -f more.json --watch
    fleetflow --project p1 vclusters remove vc-... db-vol-2

A cluster file holds ``{"vcluster": {"name": ..., "instances": [...],
"groupings": [...]}}`` (or just the inner object), or the same document as
``<vcluster name="..">`` XML, which is sent as XML for the API to read.
"""

from __future__ import annotations

import json
import pathlib
import time
import xml.etree.ElementTree as ET  # noqa: S405 - building only; parsing uses defusedxml

import click
from defusedxml import DefusedXmlException
from defusedxml import ElementTree as SafeET
from rich.console import Group
from rich.table import Table

from fleetflow.api.client import FleetflowApiError, where
from fleetflow.cli import remote, views
from fleetflow.cli.queue import queue_options

# The API's words (the CLI does not import server code).
STATUSES = ("QUEUED", "PENDING", "SCHEDULING", "BUILDING", "ACTIVE", "UPDATING", "ERROR",
            "REVERTING", "REVERTED", "DELETING", "DELETED", "PAUSED", "EXPIRED")
# Statuses after which a cluster no longer changes by itself.
SETTLED = ("ACTIVE", "ERROR", "REVERTED", "DELETED", "PAUSED", "EXPIRED")

file_option = click.option("-f", "--file", "path", required=True,
                           type=click.Path(exists=True, dir_okay=False, path_type=pathlib.Path),
                           help="The cluster document (JSON, or XML: .xml or starting with <).")
watch_option = click.option("--watch", "watch_", is_flag=True,
                            help="Show every member until the cluster settles.")
interval_option = click.option("--interval", type=click.FloatRange(min=0.05), default=1.0,
                               show_default=True, help="Seconds between polls with --watch.")


# -- files ------------------------------------------------------------------------------


def _is_xml(path: pathlib.Path, content: bytes) -> bool:
    # NOTE: a UTF-8 byte order mark or blank lines may come before the "<".
    return path.suffix.lower() == ".xml" or content.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"<"


def _json_object(path: pathlib.Path, content: bytes) -> dict:
    try:
        document = json.loads(content)
    except (ValueError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"{path}: not JSON ({exc})", param_hint="-f") from None
    if not isinstance(document, dict):
        raise click.BadParameter(f"{path}: expected a JSON object", param_hint="-f")
    return document


def _renamed_xml(path: pathlib.Path, content: bytes, fields: dict) -> bytes:
    """The XML document with the root's attributes set (a child of that name would win)."""
    try:
        root = SafeET.fromstring(content)
    except (ET.ParseError, DefusedXmlException) as exc:
        raise click.BadParameter(f"{path}: not XML ({exc})", param_hint="-f") from None
    for key, value in fields.items():
        for child in root.findall(key):
            root.remove(child)
        root.set(key, str(value))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def read_cluster(path: pathlib.Path, name: str | None, fields: dict | None = None
                 ) -> dict | bytes:
    """The body of ``create``: the inner JSON object, or the XML document's bytes, with
    ``name`` and ``fields`` (``when_full`` ...) set over the file's."""
    fields = {**({"name": name} if name is not None else {}), **(fields or {})}
    content = path.read_bytes()
    if _is_xml(path, content):
        return _renamed_xml(path, content, fields) if fields else content
    document = _json_object(path, content)
    inner = document.get("vcluster")
    cluster = dict(inner) if isinstance(inner, dict) else document
    cluster.update(fields)
    return cluster


def read_members(path: pathlib.Path) -> tuple[list, list]:
    """``(instances, groupings)`` of an ``add`` file (JSON only, as the API takes it)."""
    content = path.read_bytes()
    if _is_xml(path, content):
        raise click.BadParameter(f"{path}: members are added as JSON "
                                 '({"instances": [...], "groupings": [...]})', param_hint="-f")
    document = _json_object(path, content)
    instances, groupings = document.get("instances") or [], document.get("groupings") or []
    if not isinstance(instances, list) or not isinstance(groupings, list):
        raise click.BadParameter(f"{path}: instances and groupings must be lists",
                                 param_hint="-f")
    if not instances and not groupings:
        raise click.BadParameter(f"{path}: nothing to add", param_hint="-f")
    return instances, groupings


# -- tables -----------------------------------------------------------------------------


def _cells(values) -> list[str]:
    return ["" if v is None else str(v) for v in values]


def _where(member: dict) -> str | None:
    """A server's host or a volume's backend (or its host_id when names are hidden)."""
    return where(member)


def _yes_no(value) -> str:
    return {True: "yes", False: "no"}.get(value, "")


def _domains(domains: dict | None) -> str:
    """``member=domain`` of the members placed (a member not placed has no domain)."""
    return ", ".join(f"{m}={d}" for m, d in (domains or {}).items() if d is not None)


def _grid(title: str, columns: tuple[str, ...], rows) -> Table:
    grid = Table(title=title)
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*_cells(row))
    return grid


def members_table(vcluster: dict) -> Table:
    """One row per member: where it landed, its state, what it is attached to."""
    progress = vcluster.get("progress") or {}
    counts = "  ".join(f"{k} {progress[k]}" for k in ("active", "building", "error", "total")
                       if k in progress)
    fault = vcluster.get("fault")
    grid = _grid(f"vcluster {vcluster['id']} {vcluster.get('name') or ''} "
                 f"{vcluster['status']}  {counts}",
                 ("name", "type", "id", "status", "host/backend", "attached_to", "fault"),
                 [(i["name"], i.get("type"), i.get("id"), i.get("status"), _where(i),
                   i.get("attached_to"), (i.get("fault") or {}).get("code"))
                  for i in vcluster.get("instances") or []])
    if fault:
        grid.caption = f"fault: {fault['code']}: {fault['message']}"
    return grid


def groupings_table(groupings: list[dict]) -> Table:
    """One row per grouping: its rule, its members, and whether it holds where they are."""
    return _grid("groupings", ("name", "rule", "scope", "members", "satisfied", "domains"),
                 [(g["name"], g.get("rule"), g.get("scope"),
                   ", ".join(g.get("membersRef") or ()), _yes_no(g.get("satisfied")),
                   _domains(g.get("domains"))) for g in groupings])


def cluster_view(vcluster: dict) -> Group:
    """The members, then the groupings (what --watch redraws)."""
    groupings = vcluster.get("groupings") or []
    return Group(members_table(vcluster), *([groupings_table(groupings)] if groupings else []))


def _print_vcluster(vcluster: dict) -> None:
    remote.show(views.VCLUSTER, vcluster)
    remote.console().print(cluster_view({**vcluster, "fault": None}))


def _print_verdict(verdict: dict) -> None:
    remote.fields(f"dry run: {'fits' if verdict['fits'] else 'does not fit'}",
                  [("explanation", verdict.get("explanation"))])
    remote.table("instances", ["name", "type", "host/backend", "alternates", "attached_to"],
                 [[i["name"], i.get("type"), _where(i), ", ".join(i.get("alternates") or ()),
                   i.get("attached_to")] for i in verdict.get("instances") or []])
    if verdict.get("groupings"):
        remote.console().print(groupings_table(verdict["groupings"]))


# -- watching ---------------------------------------------------------------------------


def _poll(client, vcluster_id: str, gone_is_deleted: bool) -> dict:
    try:
        return client.get_vcluster(vcluster_id)
    except FleetflowApiError as exc:
        # A cluster being deleted may stop being shown at all once it is gone.
        if gone_is_deleted and exc.status == 404:
            return {"id": vcluster_id, "status": "DELETED", "instances": [], "groupings": []}
        raise


def watch(client, vcluster_id: str, interval: float, live: bool = True,
          gone_is_deleted: bool = False) -> dict:
    """Poll until the cluster settles; its members and groupings redrawn meanwhile.

    Ctrl-C stops the watching only: the cluster's flow goes on.
    """
    with remote.interruptible("vcluster", vcluster_id, "vclusters watch"):
        return _watch(client, vcluster_id, interval, live, gone_is_deleted)


def _watch(client, vcluster_id: str, interval: float, live: bool,
           gone_is_deleted: bool) -> dict:
    vcluster = _poll(client, vcluster_id, gone_is_deleted)
    if not live:
        while vcluster["status"] not in SETTLED:
            time.sleep(interval)
            vcluster = _poll(client, vcluster_id, gone_is_deleted)
        return vcluster
    with remote.live(cluster_view(vcluster)) as view:
        while vcluster["status"] not in SETTLED:
            time.sleep(interval)
            vcluster = _poll(client, vcluster_id, gone_is_deleted)
            view.update(cluster_view(vcluster), refresh=True)
    return vcluster


def _watch_and_exit(client, vcluster_id: str, interval: float, as_json: bool,
                    wanted: tuple[str, ...]) -> None:
    """Watch, print the end, and exit non-zero unless it ended in ``wanted``."""
    final = watch(client, vcluster_id, interval, live=not as_json,
                  gone_is_deleted="DELETED" in wanted)
    if as_json:
        remote.print_json(final)
    remote.settled_exit(final["status"], wanted)


def _accepted(client, vcluster: dict, watch_: bool, interval: float, as_json: bool,
              wanted: tuple[str, ...] = ("ACTIVE",)) -> None:
    """The answer of a change the API took (202): its id at once, then watched to its
    end if asked."""
    remote.accepted("vcluster", vcluster, as_json, watch_)
    if watch_:
        _watch_and_exit(client, vcluster["id"], interval, as_json, wanted)


# -- commands ---------------------------------------------------------------------------


@click.group("vclusters")
def vclusters() -> None:
    """Virtual clusters: servers and volumes placed together by affinity rules."""


@vclusters.command("create")
@file_option
@click.option("--name", help="Name of the cluster (instead of the file's).")
@click.option("--idempotency-key", help="Retrying with the same key returns the first "
                                        "cluster instead of making another.")
@click.option("--dry-run", is_flag=True,
              help="Only say whether it fits now and where each member would go "
                   "(exit 3 when it does not fit).")
@queue_options
@watch_option
@interval_option
@remote.api_command
def create(path, name, idempotency_key, dry_run, queue_fields, watch_, interval, as_json):
    """Create a cluster from a file: one flow places and builds every member.

    With --watch the exit status is 0 when the cluster ends ACTIVE, 4 when it
    ends otherwise (ERROR, REVERTED, EXPIRED), 5 when it stops PAUSED and 130 on Ctrl-C
    (the flow goes on). With --dry-run it is 0 when the cluster fits now and 3 when it does not.
    """
    client = remote.client()
    cluster = read_cluster(path, name, queue_fields)
    send = client.create_vcluster_xml if isinstance(cluster, bytes) else client.create_vcluster
    if dry_run:
        verdict = send(cluster, dry_run=True)
        if as_json:
            remote.print_json(verdict)
        else:
            _print_verdict(verdict)
        remote.verdict_exit(verdict)
        return
    _accepted(client, send(cluster, idempotency_key=idempotency_key), watch_, interval,
              as_json)


@vclusters.command("list")
@remote.status_option("Only clusters in this status (any case).", STATUSES)
@remote.api_command
def list_(status, as_json):
    """List the project's clusters with their progress, newest first."""
    found = remote.client().list_vclusters(status=status)
    if as_json:
        remote.print_json(found)
        return
    remote.listing("vclusters", views.VCLUSTER, found)


@vclusters.command("show")
@click.argument("vcluster_id")
@remote.api_command
def show(vcluster_id, as_json):
    """Show a cluster: where each member landed and whether each grouping holds."""
    vcluster = remote.client().get_vcluster(vcluster_id)
    if as_json:
        remote.print_json(vcluster)
    else:
        _print_vcluster(vcluster)


@vclusters.command("add")
@click.argument("vcluster_id")
@file_option
@watch_option
@interval_option
@remote.api_command
def add(vcluster_id, path, watch_, interval, as_json):
    """Add members and groupings from a file ({"instances": [...], "groupings": [...]}).

    A grouping named as an existing one adds its members to it. With --watch
    the exit status is 0 when the cluster is ACTIVE again, 4 when it ends
    otherwise, 5 when it stops PAUSED.
    """
    instances, groupings = read_members(path)
    client = remote.client()
    _accepted(client, client.add_vcluster_members(vcluster_id, instances, groupings),
              watch_, interval, as_json)


@vclusters.command("remove")
@click.argument("vcluster_id")
@click.argument("member")
@watch_option
@interval_option
@remote.api_command
def remove(vcluster_id, member, watch_, interval, as_json):
    """Delete one member (a volume is detached first; groupings lose it)."""
    client = remote.client()
    _accepted(client, client.remove_vcluster_member(vcluster_id, member), watch_, interval,
              as_json)


@vclusters.command("rename")
@click.argument("vcluster_id")
@click.argument("name")
@remote.api_command
def rename(vcluster_id, name, as_json):
    """Rename a cluster (its members keep their names)."""
    vcluster = remote.client().rename_vcluster(vcluster_id, name)
    if as_json:
        remote.print_json(vcluster)
    else:
        click.echo(f"vcluster {vcluster['id']} {vcluster.get('name')} {vcluster['status']}")


@vclusters.command("delete")
@click.argument("vcluster_id")
@watch_option
@interval_option
@remote.api_command
def delete(vcluster_id, watch_, interval, as_json):
    """Delete a cluster: a teardown flow deletes every member.

    With --watch the exit status is 0 when the cluster ends DELETED, 4 when the
    teardown ends in ERROR and 5 when it stops PAUSED.
    """
    client = remote.client()
    _accepted(client, client.delete_vcluster(vcluster_id), watch_, interval, as_json,
              wanted=("DELETED",))


@vclusters.command("watch")
@click.argument("vcluster_id")
@interval_option
@remote.api_command
def watch_command(vcluster_id, interval, as_json):
    """Show every member until the cluster settles.

    Exit status 0 when it ends ACTIVE or DELETED, 4 when it ends otherwise, 5
    when it stops PAUSED.
    """
    _watch_and_exit(remote.client(), vcluster_id, interval, as_json, ("ACTIVE", "DELETED"))
