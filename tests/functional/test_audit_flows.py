"""Where the audit runs, it sees stranded flows: the API with its jobboard, the CLI with its own.

A flow SUSPENDED with no job (what a Redis restarted empty left behind) on
the SQL jobboard of the test's database; the API route is given the board as
``fleetflow serve`` gives it, the CLI's direct mode builds one from the
configuration. Without a board, the job part is skipped and the counts say so.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from taskflow import states as tf_states

from fleetflow.engine import submit as submit_mod
from fleetflow.persistence.jobs import Job as JobRow
from fleetflow.persistence.logbook.models import FLOWDETAILS
from fleetflow.services.audit import flows as audit_flows


def _toy_flows() -> None:
    """The engine tests' toy flows, registered once whoever imported them first."""
    from fleetflow.flows import registry

    if "toy-linear" not in registry.names():
        import fleetflow.tests.unit.engine.conftest  # noqa: F401


@pytest.fixture
def backend(db):
    from fleetflow.persistence.logbook.backend import LogbookBackend

    return LogbookBackend({"connection": db.url}, engine=db.engine)


@pytest.fixture
def board(conf, db, backend):
    _toy_flows()
    from fleetflow.engine.jobboard.boards import make_jobboard

    board = make_jobboard(conf, backend)
    yield board
    board.close()


def _stranded(db, board, backend, age=dt.timedelta(minutes=10)) -> str:
    """A reservation's flow SUSPENDED ``age`` ago whose job the board lost."""
    flow_id = submit_mod.submit(board, backend, "toy-linear", {"count": 1},
                                store={"reservation_id": "r-1"})
    with db.transaction() as conn:
        conn.execute(FLOWDETAILS.update().where(FLOWDETAILS.c.uuid == flow_id).values(
            state=tf_states.SUSPENDED, updated_at=audit_flows.utcnow() - age))
        conn.execute(sa.update(JobRow).where(JobRow.name == flow_id)
                     .values(state="COMPLETE"))
    return flow_id


@pytest.fixture
def audit_services(api_services, board):
    """The app's services, its jobboard among them; no hosts to ask."""
    api_services.update(compute_rpcapi=None, jobboard=board)
    return api_services


def test_the_api_lists_its_jobboard(audit_services, db, board, backend, app, client,
                                    admin_headers):
    from fleetflow.api.state import EXTENSION_KEY

    flow_id = _stranded(db, board, backend)
    body = client.get("/v2/admin/audit", headers=admin_headers).get_json()["audit"]
    assert [(m["kind"], m["subject"]) for m in body["mismatches"]] == [
        ("stranded_flow", flow_id)]
    assert "toy-linear flow SUSPENDED on reservation r-1" in body["mismatches"][0]["detail"]
    assert (body["counts"]["jobboard"], body["counts"]["unfinished_flows"]) == (1, 1)
    # Without a board the API cannot tell, and says so.
    del app.extensions[EXTENSION_KEY].services["jobboard"]
    body = client.get("/v2/admin/audit", headers=admin_headers).get_json()["audit"]
    assert body["clean"] is True and body["counts"]["jobboard"] == 0


def test_the_api_takes_a_grace(audit_services, db, board, backend, client, admin_headers):
    flow_id = _stranded(db, board, backend, age=dt.timedelta(seconds=5))
    body = client.get("/v2/admin/audit", headers=admin_headers).get_json()["audit"]
    assert body["clean"] is True  # lost a moment ago: the engine mends that itself
    for query in ("flow_grace=1", "strict=true"):
        body = client.get(f"/v2/admin/audit?{query}",
                          headers=admin_headers).get_json()["audit"]
        assert [m["subject"] for m in body["mismatches"]] == [flow_id], query
    r = client.get("/v2/admin/audit?flow_grace=-1", headers=admin_headers)
    assert r.status_code == 400


def _run_cli(conf, *args):
    from fleetflow.cli.audit import audit_cmd

    return CliRunner().invoke(audit_cmd, ["--mode", "direct", *args], obj=conf,
                              catch_exceptions=False)


def test_the_cli_builds_its_jobboard_from_the_configuration(conf, db, board, backend,
                                                            free_port):
    flow_id = _stranded(db, board, backend)
    result = _run_cli(conf, "--json")
    assert result.exit_code == 1, result.output
    assert "jobs on the sql jobboard 'fleetflow'" in result.stderr
    body = json.loads(result.stdout)
    assert [(m["kind"], m["subject"]) for m in body["mismatches"]] == [
        ("stranded_flow", flow_id)]
    # A board that cannot be reached: the rest of the audit runs, and says what it skipped.
    conf.set_override("backend", "redis", group="jobboard")
    conf.set_override("redis_url", f"redis://127.0.0.1:{free_port}/0", group="jobboard")
    result = _run_cli(conf)
    assert result.exit_code == 0, result.output
    assert "no jobboard (" in result.stderr and "unfinished flows not checked" in result.stderr
    assert "jobboard=0" in result.output
