"""``openstack fleet ...``: the real ``openstack`` command against a live ``fleetflow serve``.

One noauth server on a four-host simulated cloud for the module; identities are
``--os-auth-type admin_token --os-token PROJECT:ROLE`` as an operator types them. Every
command runs as a member and as an administrator; help follows the caller's roles;
``--wait`` ends with the object as it ended and a non-zero exit unless it is ACTIVE
(DONE for an evacuation); ``-f json`` prints the API's objects.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import pick_free_port, stop_server

# One server for the module, and about fifty openstack commands.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("osc")]

BIN = pathlib.Path(sys.executable).parent
OPENSTACK = BIN / "openstack"
MEMBER = "demo:member"
ADMIN = "admin:admin"
ADMIN_COMMANDS = ("fleet host list", "fleet evacuation create", "fleet audit",
                  "fleet flow resume", "fleet queue list", "fleet recovery pause",
                  "fleet capacity")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The URL of ``fleetflow serve`` on a free port, its state in a directory of its own."""
    if not OPENSTACK.exists():
        pytest.skip("python-openstackclient is not installed (pip install 'fleetflow[osc]')")
    directory = tmp_path_factory.mktemp("osc")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEETFLOW_", "OS_"))}
    subprocess.run([str(BIN / "fleetflow"), "fleet", "generate", "--hosts", "4",
                    "--hosts-per-rack", "4", "-o", str(directory / "fleet.yaml")],
                   check=True, capture_output=True, env=env, timeout=120)
    port = pick_free_port()
    env.update(FLEETFLOW_API_PORT=str(port), FLEETFLOW_FLEET_FILE=str(directory / "fleet.yaml"),
               FLEETFLOW_COMPUTE_BOOT_SECONDS="0", FLEETFLOW_COMPUTE_MIGRATE_SECONDS="0")
    log = (directory / "serve.log").open("wb")
    process = subprocess.Popen([str(BIN / "fleetflow"), "serve"], cwd=directory, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                requests.get(f"{url}/openapi.json", timeout=2)
                break
            except requests.ConnectionError:
                assert process.poll() is None and time.monotonic() < deadline, \
                    (directory / "serve.log").read_text()
                time.sleep(0.2)
        yield url
    finally:
        stop_server(process)
        log.close()


@pytest.fixture(scope="module")
def osc(server, openstack_command):
    """``osc(*args, token=MEMBER, expect=0)``: run ``openstack ARGS``; ``-f json`` parsed.

    Each command is a process of its own, forked from one that imported the client
    (tests/openstack_command.py); the installed script itself runs in the help test.
    """
    def run(*args, token=MEMBER, expect=0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        command = ["--os-auth-type", "admin_token", "--os-token", token,
                   "--os-endpoint", server, *args]
        done = openstack_command.run(command, env=env)
        assert done.returncode == expect, f"{' '.join(args)}: {done.stdout}{done.stderr}"
        return json.loads(done.stdout) if "json" in args else done.stdout + done.stderr

    return run


def _wait_for(read, done, timeout=60):
    deadline = time.monotonic() + timeout
    while not done(value := read()):
        assert time.monotonic() < deadline, value
        time.sleep(0.2)
    return value


def test_help_as_a_member_hides_operator_commands(osc):
    listing = osc("help")
    assert "fleet reservation create" in listing and "fleet flow list" in listing
    assert not [name for name in ADMIN_COMMANDS if name in listing]
    fleet_help = osc("fleet", "--help")
    assert "fleet vcluster create" in fleet_help
    assert not [name for name in ADMIN_COMMANDS if name in fleet_help]
    refused = osc("fleet", "host", "list", expect=1)
    assert "not allowed for your roles (member)" in refused and "hosts:list" in refused


def test_help_as_an_administrator_and_without_credentials_lists_everything(osc, server):
    assert all(name in osc("fleet", token=ADMIN) for name in ADMIN_COMMANDS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    anonymous = subprocess.run([str(OPENSTACK), "help"], capture_output=True, text=True,
                               timeout=120, env=env).stdout
    assert all(name in anonymous for name in ADMIN_COMMANDS)


def test_groups_and_reservations_as_a_member(osc):
    group = osc("fleet", "group", "create", "web", "--policy", "anti-affinity",
                "--property", "team=blue", "-f", "json")
    assert group["name"] == "web" and group["metadata"] == {"team": "blue"}
    renamed = osc("fleet", "group", "set", "web", "--name", "front", "-f", "json")
    assert renamed["id"] == group["id"] and renamed["name"] == "front"
    assert [g["id"] for g in osc("fleet", "group", "list", "-f", "json")] == [group["id"]]

    verdict = osc("fleet", "reservation", "create", "probe", "--count", "2", "--flavor",
                  "m1.small", "--dry-run", "-f", "json")
    assert verdict["fits"] is True
    built = osc("fleet", "reservation", "create", "app", "--count", "2", "--flavor",
                "m1.small", "--group", "front", "--wait", "-f", "json")
    assert built["status"] == "ACTIVE" and len(built["instances"]) == 2
    # No host has a purple sticker: the reservation ends REVERTED, and --wait says so.
    failed = osc("fleet", "reservation", "create", "purple", "--count", "1", "--flavor",
                 "m1.small", "--capability", "sticker=purple", "--wait", "-f", "json",
                 expect=4)
    assert failed["status"] == "REVERTED"

    listed = osc("fleet", "reservation", "list", "-f", "json")
    assert {r["id"] for r in listed} == {built["id"], failed["id"]}
    assert osc("fleet", "group", "show", group["id"], "-f", "json")["members"]
    # The table is the fleetflow command's: its fields, its text.
    table = osc("fleet", "reservation", "show", built["id"])
    assert "| progress" in table and "active=2" in table and "app" in table
    osc("fleet", "reservation", "delete", built["id"], failed["id"])
    gone = osc("fleet", "reservation", "show", built["id"], "-f", "json")
    assert gone["status"] in ("DELETING", "DELETED")


def test_vclusters_as_a_member(osc, tmp_path):
    def server(name):
        return {"name": name, "type": "server",
                "spec": {"imageRef": "cirros", "flavorRef": "m1.tiny"}}

    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"instances": [server("db-1")]}))
    more = tmp_path / "more.json"
    more.write_text(json.dumps({"instances": [server("db-2")]}))
    built = osc("fleet", "vcluster", "create", "db", "--file", str(cluster), "--wait",
                "-f", "json")
    assert built["status"] == "ACTIVE" and built["name"] == "db"
    grown = osc("fleet", "vcluster", "add", built["id"], "--file", str(more), "--wait",
                "-f", "json")
    assert sorted(i["name"] for i in grown["instances"]) == ["db-1", "db-2"]
    shrunk = osc("fleet", "vcluster", "remove", built["id"], "db-1", "--wait", "-f", "json")
    assert [i["name"] for i in shrunk["instances"] if i["status"] != "DELETED"] == ["db-2"]
    assert osc("fleet", "vcluster", "set", built["id"], "--name", "store", "-f",
               "json")["name"] == "store"
    assert [v["id"] for v in osc("fleet", "vcluster", "list", "-f", "json")] == [built["id"]]
    assert osc("fleet", "vcluster", "show", built["id"], "-c", "name", "-f",
               "value").strip() == "store"
    osc("fleet", "vcluster", "delete", built["id"])

    flows = osc("fleet", "flow", "list", "-f", "json")
    assert built["flow_id"] in {f["id"] for f in flows}
    assert osc("fleet", "flow", "show", built["flow_id"], "-f", "json")["id"] == \
        built["flow_id"]


def test_hosts_evacuations_flows_and_audit_as_an_administrator(osc):
    def admin(*args, expect=0):
        return osc(*args, token=ADMIN, expect=expect)

    hosts = [h["name"] for h in admin("fleet", "host", "list", "-f", "json")]
    assert len(hosts) == 4
    assert admin("fleet", "host", "set", hosts[3], "--state", "maintenance", "--reason",
                 "disk swap", "-f", "json")["state"] == "maintenance"
    assert admin("fleet", "host", "show", hosts[3], "-f", "json")["reason"] == "disk swap"
    admin("fleet", "host", "set", hosts[3], "--state", "up")

    # One server on each of the four hosts: a server of the first has nowhere to go,
    # so its evacuation pauses for the operator.
    osc("fleet", "group", "create", "spread", "--policy", "anti-affinity")
    osc("fleet", "reservation", "create", "spread", "--count", "4", "--flavor", "m1.small",
        "--group", "spread", "--wait")
    paused = admin("fleet", "evacuation", "create", hosts[0], "--mode", "cold", "--wait",
                   "-f", "json", expect=4)
    assert paused["status"] == "PAUSED"
    stuck = paused["instances"][0]["id"]
    resumed = admin("fleet", "evacuation", "resume", paused["id"], "-f", "json")
    assert resumed["id"] == paused["id"]
    _wait_for(lambda: admin("fleet", "evacuation", "show", paused["id"], "-f", "json"),
              lambda e: e["status"] == "PAUSED")
    skipped = admin("fleet", "evacuation", "skip", paused["id"], stuck, "-f", "json")
    assert skipped["status"] in ("PARTIAL", "DONE")
    again = admin("fleet", "evacuation", "create", hosts[1], "--mode", "cold", "--wait",
                  "-c", "status", "-f", "value", expect=4)
    assert again.startswith("PAUSED")
    second = [e for e in admin("fleet", "evacuation", "list", "-f", "json")
              if e["status"] == "PAUSED"][0]
    assert admin("fleet", "evacuation", "revert", second["id"], "-f", "json")["id"] == \
        second["id"]

    # A reservation stopped PAUSED: the operator resumes its flow, then reverts it.
    held = osc("fleet", "reservation", "create", "held", "--count", "1", "--flavor",
               "m1.small", "--capability", "sticker=purple", "--on-error", "pause",
               "--wait", "-f", "json", expect=4)
    assert held["status"] == "PAUSED"
    flows = admin("fleet", "flow", "list", "--status", "paused", "-f", "json")
    assert held["flow_id"] in {f["id"] for f in flows}
    assert admin("fleet", "flow", "show", held["flow_id"], "-f", "json")["state"] == "PAUSED"
    admin("fleet", "flow", "resume", held["flow_id"], "-f", "json")
    _wait_for(lambda: admin("fleet", "flow", "show", held["flow_id"], "-f", "json"),
              lambda f: f["state"] == "PAUSED")
    admin("fleet", "flow", "revert", held["flow_id"], "-f", "json")
    _wait_for(lambda: osc("fleet", "reservation", "show", held["id"], "-f", "json"),
              lambda r: r["status"] == "REVERTED")

    assert isinstance(admin("fleet", "audit", "-f", "json"), list)


def test_queued_requests_and_the_queue_list(osc, tmp_path):
    waiting = osc("fleet", "reservation", "create", "wait", "--count", "1", "--flavor",
                  "m1.small", "--capability", "sticker=purple", "--queue", "--priority", "2",
                  "-f", "json")
    assert waiting["status"] == "QUEUED" and waiting["queue"]["position"] == 1
    cluster = tmp_path / "job.json"
    cluster.write_text(json.dumps({"instances": [{
        "name": "n1", "type": "server", "spec": {"imageRef": "cirros", "flavorRef": "m1.tiny",
                                                 "capabilities": {"sticker": "purple"}}}]}))
    job = osc("fleet", "vcluster", "create", "job", "--file", str(cluster), "--queue",
              "-f", "json")
    assert job["status"] == "QUEUED"

    listed = _wait_for(lambda: osc("fleet", "queue", "list", "-f", "json", token=ADMIN),
                       lambda q: len(q) == 2 and all(w["why"] for w in q))
    assert [(w["kind"], w["id"]) for w in listed] == [("reservation", waiting["id"]),
                                                     ("vcluster", job["id"])]
    osc("fleet", "queue", "list", expect=1)  # operators only
    osc("fleet", "reservation", "delete", waiting["id"])
    osc("fleet", "vcluster", "delete", job["id"])
    assert osc("fleet", "queue", "list", "-f", "json", token=ADMIN) == []


def test_recoveries_and_capacity_as_an_administrator(osc):
    def admin(*args, expect=0):
        return osc(*args, token=ADMIN, expect=expect)

    paused = admin("fleet", "recovery", "pause", "--reason", "window", "-f", "json")
    assert paused["paused"] is True and paused["reason"] == "window"
    assert admin("fleet", "recovery", "resume", "-f", "json")["paused"] is False
    assert admin("fleet", "recovery", "list", "-f", "json") == []  # no host has died
    assert "rc-000000000000" in admin("fleet", "recovery", "show", "rc-000000000000",
                                      expect=1)
    osc("fleet", "recovery", "pause", expect=1)  # operators only

    rows = admin("fleet", "capacity", "--by", "host", "-f", "json")
    hosts = [row for row in rows if row["level"] == "host"]
    assert len(hosts) == 4 and all(row["hosts"] == 1 for row in hosts)
    assert "vcpu" in admin("fleet", "capacity")
    osc("fleet", "capacity", expect=1)
