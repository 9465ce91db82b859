"""``fleetflow audit``: print every mismatch between placement, rows, hosts, groups and flows.

Where it runs (``--mode``):

- ``api``: ``GET /v2/admin/audit`` of a running API (``--url``, else the global
  ``--url`` / ``FLEETFLOW_URL``, else ``[api] host:port``). This is the only
  way to reach hosts simulated inside a running ``fleetflow serve``: its
  in-process RPC transport cannot be reached from another process.
- ``direct``: reads the database and placement itself and asks the hosts over
  ``[messaging] transport_url``. When that transport is in-process (embedded
  mode) and the hosts are simulated, the simulated hosts' state file is read
  instead, which is what those hosts would answer. Unfinished flows are looked
  up on the ``[jobboard]`` of the configuration; when it cannot be reached
  that part is skipped, and said so.
- ``auto`` (default): the API when it answers, otherwise direct; the choice is
  said on stderr.

Exit status: 0 when clean, 1 when there is any mismatch, 2 when the audit
could not run. The API is called as an administrator: ``--project`` defaults
to ``admin`` and, unless ``--roles`` or ``--token`` is given, the role is ``admin``.
"""

from __future__ import annotations

import json

import click
import requests

from fleetflow.cli import remote, views

MODES = ("auto", "api", "direct")
IN_PROCESS_TRANSPORTS = ("kombu+memory:", "fake:")


class ApiUnreachable(Exception):
    """Nothing answers at the API address (auto mode falls back to direct)."""


def _api_client(url: str):
    return remote.admin_client(url, timeout=600)


def audit_via_api(url: str, strict: bool, hosts, flow_grace: float | None = None) -> dict:
    params = {"strict": "true" if strict else "false"}
    if hosts:
        params["host"] = list(hosts)
    if flow_grace is not None:
        params["flow_grace"] = flow_grace
    try:
        return _api_client(url).get("/v2/admin/audit", **params)["audit"]
    except requests.ConnectionError as exc:
        raise ApiUnreachable(f"no API answers at {url}: {exc}") from exc


class SimulatedHosts:
    """The simulated hosts' guests read from their state file (embedded mode).

    Same ``list_instances`` as the RPC client; faults injected into a running
    ``serve`` live in its memory, so a "dead" host looks alive from here.
    """

    def __init__(self, conf, database):
        from fleetflow.compute.agent_setup import load_inventories
        from fleetflow.compute.drivers.fake import FakeDriver

        self.driver = FakeDriver.from_conf(conf)
        self.driver.add_hosts(load_inventories(database))

    def list_instances(self, host: str, timeout: float | None = None) -> list[dict]:
        return self.driver.list_instances(host)

    def audit_cloud(self, instances, members) -> list:
        return []  # the simulated cloud's allocations are the ledger the audit reads

    def close(self) -> None:
        self.driver.close()


def open_board(conf):
    """``(board, None)`` for the configuration's jobboard, or ``(None, why not)``.

    Without it the audit cannot tell which unfinished flows have an owner;
    the rest of it runs all the same.
    """
    from fleetflow.engine.jobboard.boards import make_jobboard

    try:
        return make_jobboard(conf), None
    except Exception as exc:  # noqa: BLE001 - any failure means "no board"
        return None, f"{type(exc).__name__}: {exc}"


def audit_direct(conf, strict: bool, hosts, rpc_timeout: float,
                 flow_grace: float | None = None) -> tuple[dict, str]:
    from fleetflow import compute as compute_clients
    from fleetflow.common.config import openstack_mode
    from fleetflow.persistence.db import get_database
    from fleetflow.persistence.placement.client import from_conf as placement_from_conf
    from fleetflow.services.audit import flows as audit_flows
    from fleetflow.services.audit.report import audit

    database = get_database(conf)
    placement = placement_from_conf(conf, database)
    simulated = (conf.compute.simulate and not openstack_mode(conf)
                 and conf.messaging.transport_url.startswith(IN_PROCESS_TRANSPORTS))
    compute = (SimulatedHosts(conf, database) if simulated
               else compute_clients.client(conf, database))
    if simulated:
        how = "database directly; guests from the simulated hosts' state file"
    elif openstack_mode(conf):
        how = "database directly; servers and allocations from the cloud's Nova and Placement"
    else:
        how = f"database directly; hosts over {conf.messaging.transport_url.split('@')[-1]}"
    board, no_board = open_board(conf)
    how += (f"; jobs on the {conf.jobboard.backend} jobboard {conf.jobboard.board_name!r}"
            if board is not None else
            f"; no jobboard ({no_board}): unfinished flows not checked")
    try:
        report = audit(database, placement, compute, hosts=list(hosts) or None,
                       strict=strict, rpc_timeout=rpc_timeout,
                       service_down_time=conf.compute.service_down_time, board=board,
                       flow_grace=audit_flows.grace(strict, flow_grace, conf))
    finally:
        if simulated:
            compute.close()
        if board is not None:
            board.close()
    return report.to_dict(), how


def print_report(result: dict, source: str) -> None:
    mismatches = result["mismatches"]
    if mismatches:
        remote.table(f"audit ({source}): {len(mismatches)} mismatches",
                     list(views.MISMATCH_COLUMNS), [views.mismatch_row(m) for m in mismatches])
    click.echo(views.audit_summary(result))


@click.command("audit")
@click.option("--json", "as_json", is_flag=True, help="Print the audit report as JSON.")
@click.option("--strict", is_flag=True,
              help="Flows have settled: transitional states are mismatches too.")
@click.option("--mode", type=click.Choice(MODES), default="auto", show_default=True,
              help="api: ask the running API; direct: read the database and hosts here; "
                   "auto: the API if it answers, else direct.")
@click.option("--url", default=None,
              help="API to ask (default: global --url / FLEETFLOW_URL, else [api] host:port).")
@click.option("--host", "hosts", multiple=True, help="Ask only this host (repeatable).")
@click.option("--rpc-timeout", type=float, default=10.0, show_default=True,
              help="Seconds a host may take to list its guests (direct mode).")
@click.option("--flow-grace", type=click.FloatRange(min=0), default=None,
              help="Seconds a flow may go without progress and without a live job "
                   "before it is stranded (default: 0 with --strict, else the larger of "
                   "60, three reconcile intervals and two claim expiries).")
@remote.identity_options
@click.pass_obj
def audit_cmd(conf, as_json, strict, mode, url, hosts, rpc_timeout, flow_grace) -> None:
    """Reconcile placement, instances, hosts, group memberships and flows.

    Prints every mismatch (stranded flows and disagreeing statuses too); exit
    0 only when the cloud is clean (1: mismatches, 2: the audit could not run).
    """
    ctx = click.get_current_context()
    try:
        result, source = _run(conf, strict, mode, url or remote.settings().url, hosts, rpc_timeout,
                              flow_grace)
    except Exception as exc:  # noqa: BLE001 - any failure to audit is exit status 2
        click.echo(f"audit failed: {exc}", err=True)
        ctx.exit(2)
    click.echo(f"audit via {source}", err=True)
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_report(result, source.split(";")[0])
    ctx.exit(0 if result["clean"] else 1)


def _run(conf, strict, mode, url, hosts, rpc_timeout, flow_grace) -> tuple[dict, str]:
    if mode in ("auto", "api"):
        try:
            return audit_via_api(url, strict, hosts, flow_grace), f"API {url}"
        except ApiUnreachable:
            if mode == "api":
                raise
            click.echo(f"no API answers at {url}; auditing directly", err=True)
    return audit_direct(conf, strict, hosts, rpc_timeout, flow_grace)
