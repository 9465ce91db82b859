"""``fleetflow flows list|show|resume|revert`` against a real API server thread."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetflow.cli.main import cli

STEP1 = "inst-0001-step"


@pytest.fixture
def run(flow_engine, live_server):
    """``fleetflow --url <server> ARGS`` (the flows verbs default to admin)."""
    def _run(*args, options=()):
        return CliRunner().invoke(cli, ["--url", live_server, *options, *args],
                                  catch_exceptions=False)

    return _run


@pytest.fixture
def paused(flow_engine):
    flow_engine.faults.add(STEP1)
    flow_id = flow_engine.submit("tenant-a", 3, on_error="pause")
    flow_engine.run_until(flow_id, "PAUSED")
    return flow_id


def test_list_by_state_and_show(paused, flow_engine, run):
    other = flow_engine.submit("tenant-b", 1)
    result = run("flows", "list", "--status", "paused", "--json")
    assert result.exit_code == 0, result.output
    assert [f["id"] for f in json.loads(result.output)] == [paused]
    listed = run("flows", "list")
    assert paused in listed.output and other in listed.output and "PAUSED" in listed.output

    shown = run("flows", "show", paused)
    assert shown.exit_code == 0, shown.output
    assert f"{STEP1}: RuntimeError: {STEP1} is broken" in shown.output
    assert json.loads(run("flows", "show", paused, "--json").output)["state"] == \
        "PAUSED"


def test_resume_then_resume_again_is_refused(paused, flow_engine, run):
    flow_engine.faults.clear()
    result = run("flows", "resume", paused)
    assert result.exit_code == 0, result.output
    assert "resume accepted" in result.output
    assert flow_engine.run_until(paused, "SUCCESS") == "SUCCESS"
    again = run("flows", "resume", paused)
    assert again.exit_code == 1 and "409" in again.output and "SUCCESS" in again.output


def test_revert(paused, flow_engine, run):
    result = run("flows", "revert", paused, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["on_error"] == "revert"
    assert flow_engine.run_until(paused, "REVERTED") == "REVERTED"


def test_state_is_a_deprecated_alias_of_status(paused, run):
    result = run("flows", "list", "--state", "PAUSED", "--json")

    assert result.exit_code == 0, result.output
    assert [f["id"] for f in json.loads(result.stdout)] == [paused]
    assert "--state is deprecated: use --status" in result.stderr
    assert "--state" not in run("flows", "list", "--help").output


def test_a_member_reads_its_own_flows_and_cannot_steer_them(paused, flow_engine, run):
    other = flow_engine.submit("tenant-b", 1)
    member = ("--project", "tenant-a", "--roles", "member")

    listed = run("flows", "list", "--json", options=member)
    shown = run("flows", "show", paused, "--json", options=member)
    foreign = run("flows", "show", other, options=member)
    resumed = run("flows", "resume", paused, options=member)

    assert listed.exit_code == 0, listed.output
    listed_ids = [f["id"] for f in json.loads(listed.output)]
    assert paused in listed_ids and other not in listed_ids
    assert json.loads(shown.output)["state"] == "PAUSED"
    assert foreign.exit_code == 1 and "404" in foreign.output
    assert resumed.exit_code == 1 and "403" in resumed.output
    missing = run("flows", "show", "no-such-flow")
    assert missing.exit_code == 1 and "404" in missing.output


def test_flows_help_does_not_say_administrators_only(run):
    assert "(administrators)" not in run("flows", "--help").output
