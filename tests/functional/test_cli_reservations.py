"""``fleetflow reserve`` and ``fleetflow reservations ...`` against a real API server thread.

The API runs on 127.0.0.1 (werkzeug, the ``live_server`` fixture) with the real
ReservationOps service; its ``submit`` plays a flow that finishes at once, setting
every instance to ``outcome["status"]``, so ``--watch`` has something to see.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetflow.cli import reservations as reservations_cli
from fleetflow.cli.main import cli
from fleetflow.common import states
from fleetflow.persistence import groups as group_rows
from fleetflow.persistence import reservations as rows


@pytest.fixture
def outcome():
    """What the fake flow does: leave PENDING (None) or settle in a status."""
    return {"status": None}


@pytest.fixture
def jobs():
    return []


@pytest.fixture
def api_services(conf, db, jobs, outcome):
    from fleetflow.services.reservations import ReservationOps

    def submit(flow_name, flow_kwargs, **options):
        jobs.append((flow_name, flow_kwargs, options))
        if flow_name == "provision" and outcome["status"]:
            rid = flow_kwargs["reservation_id"]
            with db.session() as session:
                rows.update_instances(session, rows.instance_ids(session, rid),
                                      status=outcome["status"], host="host-001")
                fault = None
                if outcome["status"] != states.ACTIVE:
                    fault = rows.fault("BUILD_FAILED", "no luck", "boot", "host-001")
                rows.set_status(session, rid, outcome["status"], fault=fault)
        return "flow"

    return {"reservations": ReservationOps(conf, db, submit=submit)}


@pytest.fixture
def run(live_server, sample_catalog):
    """Run ``fleetflow --url <server> --project tenant-a ARGS``; returns the result."""
    def _run(*args, project="tenant-a", roles="member,reader"):
        runner = CliRunner()
        return runner.invoke(cli, ["--url", live_server, "--project", project,
                                   "--roles", roles, *args], catch_exceptions=False)

    return _run


def test_reserve_posts_one_request_with_capabilities(run, jobs):
    result = run("reserve", "--count", "3", "--flavor", "m1.small", "--image", "cirros",
                 "--capability", "gpu=true", "--capability", "region=north-america",
                 "--capability", "cores>=4", "--policy", "best-effort", "--name", "calc",
                 "--json")

    assert result.exit_code == 0, result.output
    reservation = json.loads(result.output)
    assert reservation["id"].startswith("r-") and reservation["status"] == "PENDING"
    ((name, kwargs, options),) = jobs
    assert name == "provision" and kwargs["count"] == 3 and kwargs["policy"] == "best-effort"
    assert options["store"]["request_spec"]["capabilities"] == {
        "gpu": "true", "region": "north-america", "cores": ">= 4"}


def test_reserve_min_max_and_group_by_name(run, jobs, db):
    with db.session() as session:
        group_id = group_rows.create(session, "tenant-a", "web", ["anti-affinity"]).id

    result = run("reserve", "--min-count", "2", "--max-count", "4", "--flavor", "m1.small",
                 "--group", "web")

    assert result.exit_code == 0, result.output
    assert "PENDING" in result.output
    spec = jobs[0][2]["store"]["request_spec"]
    assert (spec["min_count"], spec["max_count"]) == (2, 4)
    assert spec["group"]["id"] == group_id


def test_reserve_refusals_are_one_line_errors(run, jobs, conf):
    conf.set_override("instances", 1, group="quota")

    over = run("reserve", "--count", "2", "--flavor", "m1.small")
    assert over.exit_code == 1
    assert "403" in over.output and "quota" in over.output
    unknown = run("reserve", "--count", "1", "--flavor", "m9.nope")
    assert unknown.exit_code == 1 and "flavor_ref" in unknown.output
    no_count = run("reserve", "--flavor", "m1.small")
    assert no_count.exit_code == 2 and "--count" in no_count.output
    assert jobs == []


def test_reserve_with_an_idempotency_key_twice_makes_one(run, jobs):
    args = ("reserve", "--count", "1", "--flavor", "m1.small", "--idempotency-key", "k1",
            "--json")
    first = json.loads(run(*args).output)
    again = json.loads(run(*args).output)

    assert first["id"] == again["id"]
    assert len(jobs) == 1


def test_reserve_watch_until_active(run, outcome):
    outcome["status"] = states.ACTIVE

    result = run("reserve", "--count", "2", "--flavor", "m1.small", "--watch",
                 "--interval", "0.05")

    assert result.exit_code == 0, result.output
    assert "ACTIVE" in result.output and "2/2" in result.output
    # The id comes first, before any progress, so a Ctrl-C never loses it.
    first = result.output.splitlines()[0]
    assert first.startswith("reservation r-") and "PENDING" in first


def test_reserve_watch_exits_4_when_it_fails(run, outcome):
    outcome["status"] = states.REVERTED

    result = run("reserve", "--count", "2", "--flavor", "m1.small", "--watch", "--json",
                 "--interval", "0.05")

    # Not 2: that is a usage error's.
    assert result.exit_code == 4
    final = json.loads(result.stdout)
    assert final["status"] == "REVERTED"
    assert final["fault"]["code"] == "BUILD_FAILED"


def test_watch_polls_until_the_reservation_settles():
    """The polling loop itself, on a scripted sequence of answers."""
    def answer(status, active, building):
        return {"id": "r-1", "status": status,
                "progress": {"total": 2, "active": active, "building": building,
                             "error": 0, "reverted": 0}}

    class ScriptedClient:
        def __init__(self):
            self.answers = [answer("PENDING", 0, 2), answer("BUILDING", 1, 1),
                            answer("ACTIVE", 2, 0), answer("DELETING", 0, 0)]
            self.calls = 0

        def get_reservation(self, reservation_id, instances=True):
            self.calls += 1
            return self.answers.pop(0)

    client = ScriptedClient()
    final = reservations_cli.watch(client, "r-1", interval=0, show_bar=False)

    assert final["status"] == "ACTIVE"
    assert client.calls == 3


def test_dry_run_that_does_not_fit_exits_3(run, jobs):
    # The sample hosts have no DISK_GB inventory: m1.small fits nowhere.
    result = run("reserve", "--count", "1", "--flavor", "m1.small", "--dry-run", "--json")

    assert result.exit_code == 3, result.output
    verdict = json.loads(result.output)
    assert verdict["fits"] is False and "explanation" in verdict
    assert jobs == []


def test_list_show_and_delete(run, outcome, jobs):
    outcome["status"] = states.ACTIVE
    rid = json.loads(run("reserve", "--count", "2", "--flavor", "m1.small", "--name", "calc",
                         "--json").output)["id"]

    listed = run("reservations", "list", "--json")
    assert [r["id"] for r in json.loads(listed.output)] == [rid]
    table = run("reservations", "list", "--status", "ACTIVE")
    assert rid in table.output and "calc" in table.output

    shown = json.loads(run("reservations", "show", rid, "--json").output)
    assert shown["progress"]["active"] == 2 and len(shown["instances"]) == 2
    assert "calc-0001" in run("reservations", "show", rid).output

    deleted = run("reservations", "delete", rid)
    assert deleted.exit_code == 0 and "DELETING" in deleted.output
    assert jobs[-1][0] == "reservation-teardown"


def test_list_is_newest_first_and_its_status_filter_takes_any_case(run, outcome):
    made = [json.loads(run("reserve", "--count", "1", "--flavor", "m1.small",
                           "--json").output)["id"] for _ in range(3)]

    listed = run("reservations", "list", "--json")
    pending = run("reservations", "list", "--status", "pending", "--json")

    assert [r["id"] for r in json.loads(listed.output)] == made[::-1]
    assert [r["id"] for r in json.loads(pending.output)] == made[::-1]


def test_another_projects_reservation_is_not_found(run):
    rid = json.loads(run("reserve", "--count", "1", "--flavor", "m1.small",
                         "--json").output)["id"]

    result = run("reservations", "show", rid, project="tenant-b")

    assert result.exit_code == 1 and "404" in result.output


def test_identity_and_endpoint_errors():
    runner = CliRunner()
    no_project = runner.invoke(cli, ["reservations", "list"], env={"FLEETFLOW_PROJECT": ""})
    assert no_project.exit_code == 2 and "--project" in no_project.output

    # Port 9 (discard) on the loopback: nothing listens there.
    unreachable = runner.invoke(cli, ["--url", "http://127.0.0.1:9", "--project", "p",
                                      "reservations", "list"])
    assert unreachable.exit_code == 1 and "cannot reach" in unreachable.output
