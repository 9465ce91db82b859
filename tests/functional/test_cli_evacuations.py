"""``fleetflow hosts ...``, ``fleetflow evacuate`` and ``fleetflow evacuations ...``
against a real API server thread on the four-host simulated cloud.

The EvacuationOps service is the real one; its job poster plays a flow that
ends at once when ``outcome["status"]`` says how (every move DONE, or the
evacuation PAUSED on a failed server), so ``--watch`` has something to see.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetflow.cli.main import cli
from fleetflow.common import states
from fleetflow.persistence import evacuations as rows

SOURCE = "z1-r1-h01"
DESTINATION = "z1-r2-h01"


@pytest.fixture
def outcome():
    """What the fake flow does: leave it PENDING (None), end DONE or PAUSED."""
    return {"status": None}


@pytest.fixture
def jobs():
    return []


def play(db, evacuation_id: str, status: str) -> None:
    """The end of a run: every move DONE, or the first one FAILED and the rest PAUSED."""
    with db.session() as session:
        moves = rows.moves(session, evacuation_id)
        for index, move in enumerate(moves):
            failed = status == states.PAUSED and index == 0
            rows.update_move(session, evacuation_id, move.instance_id,
                             status=states.FAILED if failed else states.DONE,
                             destination=None if failed else DESTINATION, attempts=1,
                             fault={"code": "NO_VALID_HOST", "message": "nowhere to go"}
                             if failed else None)
        rows.set_status(session, evacuation_id, status)
        if status != states.PAUSED:
            rows.release_hosts(session, evacuation_id)


@pytest.fixture
def cloud(small_cloud, api_services, conf, db, jobs, outcome):
    from fleetflow.services.evacuations import EvacuationOps
    from fleetflow.services.hosts import HostOps

    def submit(flow_name, flow_kwargs, **options):
        jobs.append((flow_name, flow_kwargs, options))
        if outcome["status"]:
            play(db, flow_kwargs["evacuation_id"], outcome["status"])
        return options.get("flow_id") or "flow"

    hosts = HostOps(conf, db, small_cloud.placement.store, small_cloud.compute)
    api_services.update(hosts=hosts, evacuations=EvacuationOps(
        conf, db, submit, compute=small_cloud.compute, on_host_state=hosts.sync_placement))
    return small_cloud


@pytest.fixture
def run(cloud, live_server):
    """Run ``fleetflow --url <server> --project admin --roles admin ARGS``."""
    def _run(*args, project="admin", roles="admin"):
        return CliRunner().invoke(cli, ["--url", live_server, "--project", project,
                                        "--roles", roles, *args], catch_exceptions=False)

    return _run


def run_json(run, *args):
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# -- hosts ------------------------------------------------------------------------------


def test_hosts_list_and_show(run, cloud):
    cloud.boot(SOURCE)

    listed = run_json(run, "hosts", "list")
    table = run("hosts", "list")
    shown = run_json(run, "hosts", "show", SOURCE)

    assert [h["name"] for h in listed] == ["z1-r1-h01", "z1-r1-h02", "z1-r2-h01",
                                          "z1-r2-h02"]
    assert {h["name"]: h["instances"] for h in listed}[SOURCE] == 1
    assert table.exit_code == 0 and "z1-r2-h02" in table.output
    assert shown["name"] == SOURCE and shown["state"] == "up" and shown["instances"] == 1
    assert SOURCE in run("hosts", "show", SOURCE).output


def test_hosts_list_and_show_used_and_total_capacity(run, cloud, assert_audit_clean):
    cloud.boot(SOURCE)
    cloud.boot(SOURCE)
    _generation, inventory = cloud.placement.store.get_inventories(cloud.host_uuid(SOURCE))
    vcpu = inventory["VCPU"]
    total = int((vcpu["total"] - vcpu["reserved"]) * vcpu["allocation_ratio"])

    shown = run_json(run, "hosts", "show", SOURCE)
    idle = run_json(run, "hosts", "show", "z1-r2-h02")
    table = run("hosts", "list")
    text = run("hosts", "show", SOURCE)

    # Two instances of 1 VCPU, 2048 MB and 20 GB each (the cloud's boot).
    assert shown["capacity"]["VCPU"] == {"used": 2, "total": total, "free": total - 2}
    assert shown["capacity"]["MEMORY_MB"]["used"] == 4096
    assert shown["capacity"]["DISK_GB"]["used"] == 40
    assert idle["capacity"]["VCPU"]["used"] == 0
    assert "vcpu" in table.output and f"2/{total}" in table.output
    assert f"VCPU 2/{total} ({total - 2} free)" in text.output
    assert_audit_clean(cloud.database, cloud.placement, cloud.compute)


def test_hosts_set_state_and_filter(run):
    result = run("hosts", "set-state", SOURCE, "maintenance", "--reason", "disk swap")

    assert result.exit_code == 0, result.output
    assert "maintenance" in result.output
    shown = run_json(run, "hosts", "list", "--status", "MAINTENANCE")
    assert [(h["name"], h["reason"]) for h in shown] == [(SOURCE, "disk swap")]
    # The flag of earlier versions still filters, with a word on stderr.
    old_flag = run("hosts", "list", "--state", "maintenance", "--json")
    assert [h["name"] for h in json.loads(old_flag.stdout)] == [SOURCE]
    assert "--state is deprecated" in old_flag.stderr
    assert run("hosts", "set-state", SOURCE, "asleep").exit_code == 2
    missing = run("hosts", "set-state", "z9-r9-h99", "up")
    assert missing.exit_code == 1 and "404" in missing.output


def test_hosts_need_an_administrator(run):
    result = run("hosts", "list", roles="member,reader", project="tenant-a")

    assert result.exit_code == 1 and "403" in result.output


def test_hosts_simulate_dead_and_alive(run, cloud):
    from fleetflow.compute.exceptions import HostDead

    dead = run_json(run, "hosts", "simulate", SOURCE, "--dead")
    assert dead["faults"]["dead"] is True and dead["name"] == SOURCE
    with pytest.raises(HostDead):
        cloud.compute.ping(SOURCE)

    alive = run("hosts", "simulate", SOURCE, "--alive")
    assert alive.exit_code == 0 and "alive" in alive.output
    assert cloud.compute.ping(SOURCE)["alive"] is True
    neither = run("hosts", "simulate", SOURCE)
    assert neither.exit_code == 2 and "--dead" in neither.output


# -- evacuate ---------------------------------------------------------------------------


def test_evacuate_posts_one_request(run, cloud, jobs, db):
    servers = sorted([cloud.boot(SOURCE), cloud.boot(SOURCE)])

    evacuation = run_json(run, "evacuate", SOURCE, "--mode", "live", "--on-error",
                          "continue", "--max-parallel", "3", "--target-host", DESTINATION,
                          "--target-host", "z1-r2-h02", "--reason", "firmware")

    assert evacuation["id"].startswith("e-") and evacuation["status"] == "PENDING"
    ((name, kwargs, options),) = jobs
    assert name == "evacuate" and kwargs["lanes"] == 3
    assert sorted(options["store"]["instance_uuids"]) == servers
    with db.session() as session:
        row = rows.get(session, evacuation["id"])
        assert (row.on_error, row.reason) == ("continue", "firmware")
        assert row.target_hosts == [DESTINATION, "z1-r2-h02"]
    plain = run("evacuate", "z1-r1-h02", "--mode", "cold")
    assert plain.exit_code == 0 and "PENDING" in plain.output and "/v2/admin/evacuations/" \
        in plain.output


def test_evacuate_dry_run_writes_nothing(run, cloud, jobs):
    server = cloud.boot(SOURCE)

    verdict = run_json(run, "evacuate", SOURCE, "--mode", "live", "--target-host",
                       DESTINATION, "--dry-run")
    table = run("evacuate", SOURCE, "--mode", "live", "--dry-run")

    assert verdict["fits"] is True
    assert [(i["id"], i["destination"]) for i in verdict["instances"]] == [
        (server, DESTINATION)]
    assert table.exit_code == 0 and server in table.output and "fits" in table.output
    assert jobs == [] and run_json(run, "evacuations", "list") == []


def test_evacuate_refusals_are_one_line_errors(run, cloud, jobs):
    cloud.boot(SOURCE)

    alive = run("evacuate", SOURCE, "--mode", "rebuild")
    unknown = run("evacuate", "z9-r9-h99", "--mode", "live")
    bad_mode = run("evacuate", SOURCE, "--mode", "teleport")
    no_host = run("evacuate", "--mode", "live")

    assert alive.exit_code == 1 and "409" in alive.output and "HOST_ALIVE" in alive.output
    assert unknown.exit_code == 1 and "404" in unknown.output
    assert bad_mode.exit_code == 2 and no_host.exit_code == 2
    assert jobs == []
    assert run("evacuate", SOURCE, "--mode", "live").exit_code == 0
    held = run("evacuate", SOURCE, "--mode", "cold")
    assert held.exit_code == 1 and "EVACUATION_IN_PROGRESS" in held.output


def test_evacuate_watch_until_done(run, cloud, outcome):
    servers = [cloud.boot(SOURCE), cloud.boot(SOURCE)]
    outcome["status"] = states.DONE

    result = run("evacuate", SOURCE, "--mode", "live", "--watch", "--interval", "0.05")

    assert result.exit_code == 0, result.output
    assert "DONE" in result.output and DESTINATION in result.output
    assert all(server in result.output for server in servers)


def test_evacuate_watch_exits_5_when_it_pauses(run, cloud, outcome):
    cloud.boot(SOURCE)
    outcome["status"] = states.PAUSED

    result = run("evacuate", SOURCE, "--mode", "live", "--watch", "--interval", "0.05",
                 "--json")

    assert result.exit_code == 5
    final = json.loads(result.stdout)
    assert final["status"] == "PAUSED"
    assert final["instances"][0]["fault"]["code"] == "NO_VALID_HOST"


# -- evacuations --------------------------------------------------------------------------


@pytest.fixture
def paused(run, cloud, outcome):
    """A live evacuation of SOURCE paused on one of two servers: (id, (failed, done))."""
    cloud.boot(SOURCE)
    cloud.boot(SOURCE)
    outcome["status"] = states.PAUSED
    evacuation_id = run_json(run, "evacuate", SOURCE, "--mode", "live")["id"]
    outcome["status"] = None
    by_status = {i["status"]: i["id"] for i in run_json(
        run, "evacuations", "show", evacuation_id)["instances"]}
    return evacuation_id, (by_status["FAILED"], by_status["DONE"])


def test_evacuations_list_show_and_filters(run, paused, cloud):
    evacuation_id, servers = paused
    cloud.boot("z1-r1-h02")
    other = run_json(run, "evacuate", "z1-r1-h02", "--mode", "cold")["id"]

    listed = run_json(run, "evacuations", "list")
    assert sorted(e["id"] for e in listed) == sorted([evacuation_id, other])
    assert [e["id"] for e in run_json(run, "evacuations", "list", "--status",
                                      "PAUSED")] == [evacuation_id]
    assert [e["id"] for e in run_json(run, "evacuations", "list", "--host",
                                      "z1-r1-h02")] == [other]
    table = run("evacuations", "list")
    assert evacuation_id in table.output and other in table.output
    shown = run("evacuations", "show", evacuation_id)
    assert shown.exit_code == 0 and all(s in shown.output for s in servers)
    assert "NO_VALID_HOST" in shown.output
    assert run_json(run, "evacuations", "show", evacuation_id)["status"] == "PAUSED"
    missing = run("evacuations", "show", "e-000000000000")
    assert missing.exit_code == 1 and "404" in missing.output


def test_evacuations_skip_then_resume(run, paused, jobs):
    evacuation_id, (failed, _done) = paused

    skipped = run_json(run, "evacuations", "skip", evacuation_id, failed)

    # Nothing was left to move: the evacuation ends without another run.
    assert skipped["status"] == "PARTIAL"
    assert {i["id"]: i["status"] for i in skipped["instances"]}[failed] == "SKIPPED"
    assert len(jobs) == 1
    again = run("evacuations", "resume", evacuation_id)
    assert again.exit_code == 1 and "409" in again.output


def test_evacuations_resume_posts_a_run(run, paused, jobs):
    evacuation_id, (failed, _done) = paused

    result = run("evacuations", "resume", evacuation_id)

    assert result.exit_code == 0, result.output
    assert f"evacuation {evacuation_id} PENDING" in result.output
    assert jobs[-1][2]["store"]["instance_uuids"] == [failed]


def test_evacuations_revert_and_watch(run, paused):
    evacuation_id, (failed, _done) = paused

    reverted = run_json(run, "evacuations", "revert", evacuation_id)
    watched = run("evacuations", "watch", evacuation_id, "--interval", "0.05")

    assert reverted["status"] == "REVERTED"
    assert {i["id"]: i["status"] for i in reverted["instances"]}[failed] == "REVERTED"
    assert watched.exit_code == 4 and "REVERTED" in watched.output
    assert watched.output.endswith("\n")
    assert reverted["progress"]["reverted"] == 1 and reverted["progress"]["pending"] == 0
    assert "pending 0" in watched.output and "reverted 1" in watched.output


def test_evacuations_need_an_administrator(run, paused):
    evacuation_id, _servers = paused

    for args in (("evacuations", "list"), ("evacuations", "show", evacuation_id),
                 ("evacuations", "revert", evacuation_id),
                 ("evacuate", SOURCE, "--mode", "live")):
        result = run(*args, roles="member,reader", project="tenant-a")
        assert result.exit_code == 1 and "403" in result.output, args
