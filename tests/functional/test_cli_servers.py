"""``fleetflow servers ...`` against a real API server thread on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetflow.api.hosts_view import opaque_id
from fleetflow.cli.main import cli
from fleetflow.common import states
from fleetflow.persistence import reservations as rows
from tests.functional.host_names import restrict_show_host


@pytest.fixture
def api_services(recording_services):
    return recording_services


@pytest.fixture
def run(live_server, sample_catalog):
    def _run(*args, project="tenant-a", roles="member,reader"):
        return CliRunner().invoke(cli, ["--url", live_server, "--project", project,
                                        "--roles", roles, *args], catch_exceptions=False)

    return _run


@pytest.fixture
def reservation(run, db):
    """A 2-instance reservation whose first instance is ACTIVE on host-001."""
    rid = json.loads(run("reserve", "--count", "2", "--flavor", "m1.small",
                         "--json").output)["id"]
    with db.session() as session:
        ids = rows.instance_ids(session, rid)
        rows.update_instance(session, ids[0], status=states.ACTIVE, host="host-001",
                             attempts=1, hosts_tried=["host-001"])
    return rid, ids


def test_list_by_reservation_and_show(run, reservation):
    rid, ids = reservation
    listed = json.loads(run("servers", "list", "--reservation", rid, "--json").output)

    assert sorted(s["id"] for s in listed) == sorted(ids)
    active = run("servers", "list", "--reservation", rid, "--status", "ACTIVE")
    assert ids[0] in active.output and ids[1] not in active.output
    shown = json.loads(run("servers", "show", ids[0], "--json").output)
    # By default the project's members see where their servers run.
    assert shown["host"] == "host-001" and shown["reservation_id"] == rid
    assert shown["host_id"] == opaque_id("tenant-a", "host-001")
    admin = json.loads(run("servers", "show", ids[0], "--json", roles="admin").output)
    assert admin["host"] == "host-001" and admin["host_id"] == shown["host_id"]
    assert "host-001" in run("servers", "show", ids[0], roles="admin").output


def test_tables_show_the_host_id_where_the_host_is_hidden(run, reservation, conf):
    _rid, ids = reservation
    restrict_show_host(conf)

    shown = json.loads(run("servers", "show", ids[0], "--json").output)
    listed = run("servers", "list").output

    assert shown["host"] is None
    host_id = opaque_id("tenant-a", "host-001")
    assert shown["host_id"] == host_id and "host-001" not in listed
    # The table folds long cells: the id's first characters are enough to find it.
    assert host_id[:12] in listed


def test_host_filter_needs_an_administrator(run, reservation):
    _rid, ids = reservation

    refused = run("servers", "list", "--host", "host-001")
    assert refused.exit_code == 1 and "403" in refused.output
    admin = run("servers", "list", "--host", "host-001", "--json", roles="admin")
    assert [s["id"] for s in json.loads(admin.output)] == [ids[0]]


def test_delete(run, reservation, jobs):
    _rid, ids = reservation

    deleted = run("servers", "delete", ids[0], "--json")
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.output)["status"] == "DELETING"
    assert jobs[-1][1]["instance_ids"] == [ids[0]]
    building = run("servers", "delete", ids[1])
    assert building.exit_code == 1 and "409" in building.output
    assert run("servers", "show", ids[0], project="tenant-b").exit_code == 1


def test_all_projects_lists_every_projects_servers_for_administrators(run, reservation):
    _rid, ids = reservation
    theirs = json.loads(run("reserve", "--count", "1", "--flavor", "m1.small", "--json",
                            project="tenant-b").output)["id"]

    every = json.loads(run("servers", "list", "--all-projects", "--json", project="admin",
                           roles="admin").output)
    assert {s["tenant_id"] for s in every} == {"tenant-a", "tenant-b"} and len(every) == 3
    one = json.loads(run("servers", "list", "--in-project", "tenant-b", "--json",
                         project="admin", roles="admin").output)
    assert [s["reservation_id"] for s in one] == [theirs]
    table = run("servers", "list", "--all-projects", "--host", "host-001", project="admin",
                roles="admin")
    assert table.exit_code == 0 and "project" in table.output
    assert ids[0] in table.output and "tenant-a" in table.output
    refused = run("servers", "list", "--all-projects")
    assert refused.exit_code == 1 and "403" in refused.output
