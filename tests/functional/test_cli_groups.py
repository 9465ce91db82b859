"""``fleetflow groups ...`` against a real API server thread on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetflow.cli.main import cli
from fleetflow.persistence import groups as group_rows

MEMBER = "0f0c8a34-5d1e-4c59-9a53-0d2f3e7d6a01"


@pytest.fixture
def run(live_server):
    def _run(*args, project="tenant-a"):
        return CliRunner().invoke(cli, ["--url", live_server, "--project", project, *args],
                                  catch_exceptions=False)

    return _run


def test_create_show_list(run):
    created = run("groups", "create", "--name", "db", "--policy", "anti-affinity",
                  "--policy", "host-capabilities", "--capability", "ssd=true",
                  "--scope", "rack", "--max-per-host", "2", "--meta", "tier=data", "--json")

    assert created.exit_code == 0, created.output
    group = json.loads(created.output)
    assert group["policies"] == ["anti-affinity", "host-capabilities"]
    assert group["capabilities"] == {"ssd": "true"} and group["metadata"] == {"tier": "data"}
    assert group["scope"] == "rack" and group["max_per_host"] == 2

    shown = run("groups", "show", group["id"])
    assert shown.exit_code == 0 and "anti-affinity" in shown.output and "tier=data" in shown.output
    listed = json.loads(run("groups", "list", "--json").output)
    assert [g["id"] for g in listed] == [group["id"]]
    assert group["id"] in run("groups", "list", "--name", "db").output


def test_update_and_delete_follow_the_membership_rules(run, db):
    group = json.loads(run("groups", "create", "--name", "web", "--json").output)
    with db.session() as session:
        group_rows.join(session, group["id"], MEMBER, "host-001")

    renamed = json.loads(run("groups", "update", group["id"], "--name", "web2",
                             "--meta", "owner=ops", "--json").output)
    assert renamed["name"] == "web2" and renamed["metadata"] == {"owner": "ops"}
    assert renamed["members"] == [MEMBER]

    refused = run("groups", "update", group["id"], "--policy", "affinity")
    assert refused.exit_code == 1 and "409" in refused.output
    busy = run("groups", "delete", group["id"])
    assert busy.exit_code == 1 and "409" in busy.output

    with db.session() as session:
        group_rows.leave(session, MEMBER)
    assert run("groups", "update", group["id"], "--policy", "affinity").exit_code == 0
    deleted = run("groups", "delete", group["id"])
    assert deleted.exit_code == 0 and "deleted" in deleted.output
    assert run("groups", "show", group["id"]).exit_code == 1


def test_refusals(run):
    assert run("groups", "update", "some-id").exit_code == 2
    bad = run("groups", "create", "--policy", "host-capabilities")
    assert bad.exit_code == 1 and "capabilities" in bad.output
    mine = json.loads(run("groups", "create", "--name", "mine", "--json").output)
    assert run("groups", "show", mine["id"], project="tenant-b").exit_code == 1


def test_show_update_delete_by_name(run):
    group = json.loads(run("groups", "create", "--name", "cache", "--json").output)

    shown = json.loads(run("groups", "show", "cache", "--json").output)
    assert shown["id"] == group["id"]
    renamed = json.loads(run("groups", "update", "cache", "--name", "cache2", "--json").output)
    assert renamed["id"] == group["id"] and renamed["name"] == "cache2"
    deleted = run("groups", "delete", "cache2", "--json")
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.output)["id"] == group["id"]
    assert run("groups", "show", group["id"]).exit_code == 1


def test_a_name_two_groups_share_asks_for_the_id(run):
    for _ in range(2):
        run("groups", "create", "--name", "twin")

    result = run("groups", "show", "twin")

    assert result.exit_code == 2 and "2 groups are named 'twin'; give its id" in result.output
    missing = run("groups", "delete", "no-such-group")
    assert missing.exit_code == 1 and "404" in missing.output
