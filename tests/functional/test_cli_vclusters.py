"""``fleetflow vclusters ...`` and ``fleetflow volumes ...`` against a real API server
thread on the four-host simulated cloud (two racks, a shared backend each).

The VClusterOps service is the real one; its job poster runs the posted flow
(build or teardown) to its end on TaskFlow's serial engine before the API
answers, so ``--watch`` sees the cluster settle where the real flow left it.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetflow.cli.main import cli

IMAGE, FLAVOR = "cirros", "m1.small"
HOSTS = ("z1-r1-h01", "z1-r1-h02", "z1-r2-h01", "z1-r2-h02")
BACKENDS = ("z1-r1-shared", "z1-r2-shared")


def server(name: str) -> dict:
    return {"name": name, "type": "server", "spec": {"imageRef": IMAGE, "flavorRef": FLAVOR}}


def volume(name: str, size: int = 10) -> dict:
    return {"name": name, "type": "volume", "spec": {"size": size}}


def grouping(name: str, members: list[str], rule: str) -> dict:
    return {"name": name, "membersRef": members, "spec": {"rule": rule}}


# Two servers apart, each with its volume beside it (the second example of docs/vcluster.md).
TWO_SERVERS_APART = {
    "name": "db",
    "instances": [server("db-server-1"), volume("db-vol-1"), server("db-server-2"),
                  volume("db-vol-2")],
    "groupings": [grouping("group-1", ["db-server-1", "db-vol-1"], "affinity"),
                  grouping("group-2", ["db-server-2", "db-vol-2"], "affinity"),
                  grouping("group-3", ["db-server-1", "db-server-2"], "anti-affinity"),
                  grouping("group-4", ["db-vol-1", "db-vol-2"], "anti-affinity")],
}

TWO_SERVERS_APART_XML = f"""<?xml version="1.0" encoding="UTF-8"?>
<vcluster name="db-xml">
  <instances>
    <instance name="db-server-1" type="server">
      <spec imageRef="{IMAGE}" flavorRef="{FLAVOR}"/></instance>
    <instance name="db-vol-1" type="volume"><spec size="10"/></instance>
    <instance name="db-server-2" type="server">
      <spec imageRef="{IMAGE}" flavorRef="{FLAVOR}"/></instance>
    <instance name="db-vol-2" type="volume"><spec size="10"/></instance>
  </instances>
  <groupings>
    <grouping name="group-1"><membersRef><member>db-server-1</member>
      <member>db-vol-1</member></membersRef><spec rule="affinity"/></grouping>
    <grouping name="group-2"><membersRef><member>db-server-2</member>
      <member>db-vol-2</member></membersRef><spec rule="affinity"/></grouping>
    <grouping name="group-3"><membersRef><member>db-server-1</member>
      <member>db-server-2</member></membersRef><spec rule="anti-affinity"/></grouping>
    <grouping name="group-4"><membersRef><member>db-vol-1</member>
      <member>db-vol-2</member></membersRef><spec rule="anti-affinity"/></grouping>
  </groupings>
</vcluster>
"""


@pytest.fixture
def runs():
    """The names of the flows the API posted (each ran to its end before the answer)."""
    return []


@pytest.fixture
def cloud(small_cloud, api_services, conf, db, runs):
    import taskflow.engines

    import fleetflow.flows.vcluster  # noqa: F401  (registers the flows)
    from fleetflow.flows import registry
    from fleetflow.services.vclusters import VClusterOps

    def submit(flow_name, flow_kwargs, store=None, flow_id=None, **_options):
        runs.append(flow_name)
        engine = taskflow.engines.load(registry.build(flow_name, **flow_kwargs),
                                       store=dict(store or {}), engine="serial")
        try:
            engine.run()
        except Exception:  # noqa: BLE001 - a reverted flow raises; the cluster says so
            pass
        return flow_id

    api_services.update(vclusters=VClusterOps(conf, db, submit))
    return small_cloud


@pytest.fixture
def run(cloud, live_server):
    """Run ``fleetflow --url <server> --project tenant-a ARGS``; returns the result."""
    def _run(*args, project="tenant-a", roles="member,reader"):
        return CliRunner().invoke(cli, ["--url", live_server, "--project", project,
                                        "--roles", roles, *args], catch_exceptions=False)

    return _run


def run_json(run, *args, **identity):
    result = run(*args, "--json", **identity)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def write(tmp_path):
    """``write(name, document)``: a file in the test's directory (dicts as JSON)."""
    def _write(name: str, document) -> str:
        path = tmp_path / name
        path.write_text(document if isinstance(document, str) else json.dumps(document))
        return str(path)

    return _write


@pytest.fixture
def active(run, write):
    """Two servers apart with their volumes, built and ACTIVE; its id."""
    created = run_json(run, "vclusters", "create", "-f", write("db.json", TWO_SERVERS_APART),
                       "--watch", "--interval", "0.05")
    assert created["status"] == "ACTIVE", created
    return created["id"]


def by_name(vcluster: dict) -> dict[str, dict]:
    return {m["name"]: m for m in vcluster["instances"]}


def assert_two_servers_apart_hold(vcluster: dict) -> None:
    members = by_name(vcluster)
    assert vcluster["status"] == "ACTIVE"
    assert members["db-server-1"]["host"] != members["db-server-2"]["host"]
    assert {members["db-vol-1"]["backend"], members["db-vol-2"]["backend"]} == set(BACKENDS)
    assert members["db-vol-1"]["attached_to"] == "db-server-1"
    assert all(g["satisfied"] for g in vcluster["groupings"]), vcluster["groupings"]


# -- create -----------------------------------------------------------------------------


def test_create_from_a_json_file_and_watch_until_active(run, write, runs):
    result = run("vclusters", "create", "-f", write("db.json", {"vcluster": TWO_SERVERS_APART}),
                 "--watch", "--interval", "0.05")

    assert result.exit_code == 0, result.output
    assert "ACTIVE" in result.output and runs == ["vcluster-build"]
    assert all(name in result.output for name in ("db-server-1", "db-vol-2", "group-4"))
    assert any(host in result.output for host in HOSTS)
    assert all(backend in result.output for backend in BACKENDS)
    (listed,) = run_json(run, "vclusters", "list")
    assert listed["name"] == "db"
    assert_two_servers_apart_hold(run_json(run, "vclusters", "show", listed["id"]))


def test_create_from_an_xml_file_with_another_name(run, write):
    final = run_json(run, "vclusters", "create", "-f", write("db.xml", TWO_SERVERS_APART_XML),
                     "--name", "renamed", "--watch", "--interval", "0.05")

    assert final["name"] == "renamed"
    assert_two_servers_apart_hold(final)
    # Content starting with "<" is XML whatever the file is called.
    plain = run("vclusters", "create", "-f", write("db.txt", TWO_SERVERS_APART_XML))
    assert plain.exit_code == 0, plain.output
    assert "PENDING" in plain.output and "/vclusters/vc-" in plain.output
    names = sorted(v["name"] for v in run_json(run, "vclusters", "list"))
    assert names == ["db-xml", "renamed"]


def test_create_without_watch_answers_at_once(run, write):
    created = run_json(run, "vclusters", "create", "-f", write("db.json", TWO_SERVERS_APART))

    assert created["id"].startswith("vc-") and created["status"] == "PENDING"
    assert created["links"][0]["href"].endswith(f"/v2/tenant-a/vclusters/{created['id']}")


def test_dry_run_shows_where_each_member_would_go(run, write, runs):
    path = write("db.json", TWO_SERVERS_APART)

    verdict = run_json(run, "vclusters", "create", "-f", path, "--dry-run")
    table = run("vclusters", "create", "-f", path, "--dry-run")
    xml_verdict = run_json(run, "vclusters", "create", "-f", write("db.xml", TWO_SERVERS_APART_XML),
                           "--dry-run")

    assert verdict["fits"] is True and xml_verdict["fits"] is True
    where = {i["name"]: i.get("host") or i.get("backend") for i in verdict["instances"]}
    assert where["db-server-1"] in HOSTS and where["db-vol-1"] in BACKENDS
    assert where["db-server-1"] != where["db-server-2"]
    assert [g["name"] for g in verdict["groupings"]] == ["group-1", "group-2", "group-3",
                                                         "group-4"]
    assert table.exit_code == 0, table.output
    assert "fits" in table.output and "db-vol-2" in table.output
    assert where["db-server-2"] in table.output and "anti-affinity" in table.output
    assert runs == [] and run_json(run, "vclusters", "list") == []


def test_a_dry_run_that_does_not_fit_exits_3(run, write, runs):
    # Five servers each on a host of its own, and the cloud has four hosts.
    apart = {"vcluster": {"name": "apart", "instances": [
        {"name": f"s{i}", "type": "server", "spec": {"imageRef": "cirros",
                                                     "flavorRef": "m1.small"}}
        for i in range(5)], "groupings": [
        {"name": "g", "membersRef": [f"s{i}" for i in range(5)],
         "spec": {"rule": "anti-affinity"}}]}}

    result = run("vclusters", "create", "-f", write("apart.json", apart), "--dry-run",
                 "--json")

    assert result.exit_code == 3, result.output
    assert json.loads(result.stdout)["fits"] is False and runs == []


def test_an_idempotency_key_makes_one_cluster(run, write, runs):
    args = ("vclusters", "create", "-f", write("db.json", TWO_SERVERS_APART),
            "--idempotency-key", "k1")

    first, again = run_json(run, *args), run_json(run, *args)

    assert first["id"] == again["id"] and runs == ["vcluster-build"]


def test_watch_exits_4_when_the_build_reverts(run, write, cloud):
    for host in HOSTS:
        cloud.driver.set_faults(host, fail_next=5)

    result = run("vclusters", "create", "-f", write("db.json", TWO_SERVERS_APART), "--watch",
                 "--interval", "0.05", "--json")

    assert result.exit_code == 4, result.output
    final = json.loads(result.stdout)
    assert final["status"] == "REVERTED" and final["fault"] is not None
    # The id came first, on stderr, so stdout stays one JSON document.
    assert result.stderr.startswith(f"vcluster {final['id']} ")
    watched = run("vclusters", "watch", final["id"], "--interval", "0.05")
    assert watched.exit_code == 4 and "REVERTED" in watched.output
    # The table's last line ends: the shell's prompt comes on a line of its own.
    assert watched.output.endswith("\n")


# -- reading ----------------------------------------------------------------------------


def test_list_and_show(run, active, write):
    pending = run_json(run, "vclusters", "create", "-f", write("db.json", TWO_SERVERS_APART),
                       "--name", "second")["id"]

    table = run("vclusters", "list")
    shown = run("vclusters", "show", active)
    vcluster = run_json(run, "vclusters", "show", active)

    assert table.exit_code == 0 and active in table.output and pending in table.output
    # Newest first, whatever the case of the status asked for.
    assert [v["id"] for v in run_json(run, "vclusters", "list", "--status", "active")] == [
        pending, active]
    assert run_json(run, "vclusters", "list", "--status", "ERROR") == []
    assert shown.exit_code == 0, shown.output
    members = by_name(vcluster)
    for name in ("db-server-1", "db-server-2", "db-vol-1", "db-vol-2"):
        assert name in shown.output
    for where in (members["db-server-1"]["host"], members["db-server-2"]["host"],
                  *BACKENDS):
        assert where in shown.output
    groupings = shown.output.split("satisfied")[1]
    assert groupings.count(" yes ") == 4 and " no " not in groupings
    assert "anti-affinity" in shown.output and "group-4" in shown.output
    assert run("vclusters", "watch", active, "--interval", "0.05").exit_code == 0


def test_volumes_list_and_show(run, active):
    members = by_name(run_json(run, "vclusters", "show", active))

    found = run_json(run, "volumes", "list", "--vcluster-id", active)
    table = run("volumes", "list")
    one = run_json(run, "volumes", "show", members["db-vol-1"]["id"])
    shown = run("volumes", "show", members["db-vol-1"]["id"])
    as_admin = run_json(run, "volumes", "show", members["db-vol-1"]["id"], roles="admin")

    assert sorted(v["name"] for v in found) == ["db-vol-1", "db-vol-2"]
    assert {v["size"] for v in found} == {10} and {v["vcluster_id"] for v in found} == {
        active}
    assert table.exit_code == 0 and members["db-vol-2"]["id"] in table.output
    assert one["id"] == members["db-vol-1"]["id"] and one["attached_to"]
    assert one["backend"] is None and as_admin["backend"] == members["db-vol-1"]["backend"]
    assert shown.exit_code == 0 and "db-vol-1" in shown.output
    assert run_json(run, "volumes", "list", "--vcluster-id", "vc-000000000000") == []


# -- changes ----------------------------------------------------------------------------


def test_add_then_remove_a_member(run, active, write, runs):
    more = {"instances": [server("db-server-3")],
            "groupings": [grouping("group-3", ["db-server-3"], "anti-affinity")]}

    added = run("vclusters", "add", active, "-f", write("more.json", more), "--watch",
                "--interval", "0.05")

    assert added.exit_code == 0, added.output
    assert "db-server-3" in added.output and "ACTIVE" in added.output
    vcluster = run_json(run, "vclusters", "show", active)
    hosts = [by_name(vcluster)[f"db-server-{n}"]["host"] for n in (1, 2, 3)]
    assert len(set(hosts)) == 3
    assert {g["name"]: g["membersRef"] for g in vcluster["groupings"]}["group-3"] == [
        "db-server-1", "db-server-2", "db-server-3"]

    removed = run_json(run, "vclusters", "remove", active, "db-server-3", "--watch",
                       "--interval", "0.05")

    assert removed["status"] == "ACTIVE" and "db-server-3" not in by_name(removed)
    assert runs == ["vcluster-build", "vcluster-build", "vcluster-teardown"]
    plain = run("vclusters", "remove", active, "db-vol-2")
    assert plain.exit_code == 0 and f"vcluster {active} UPDATING" in plain.output


def test_rename(run, active):
    result = run("vclusters", "rename", active, "orders-db")

    assert result.exit_code == 0, result.output
    assert "orders-db" in result.output
    assert run_json(run, "vclusters", "rename", active, "again")["name"] == "again"
    assert run_json(run, "vclusters", "show", active)["name"] == "again"


def test_delete_watch_until_deleted(run, active):
    volumes = [v["id"] for v in run_json(run, "volumes", "list", "--vcluster-id", active)]

    result = run("vclusters", "delete", active, "--watch", "--interval", "0.05")

    assert result.exit_code == 0, result.output
    assert "DELETED" in result.output
    assert run_json(run, "vclusters", "show", active)["status"] == "DELETED"
    assert run_json(run, "volumes", "list") == []
    gone = run_json(run, "volumes", "list", "--status", "DELETED", "--vcluster-id", active)
    assert sorted(v["id"] for v in gone) == sorted(volumes)
    again = run_json(run, "vclusters", "delete", active)
    assert again["status"] == "DELETED"


# -- refusals ---------------------------------------------------------------------------


def test_api_errors_are_one_line_messages(run, active, write):
    unknown = run("vclusters", "show", "vc-000000000000")
    no_member = run("vclusters", "remove", active, "db-server-9")
    bad_flavor = run("vclusters", "create", "-f", write("bad.json", {
        "name": "x", "instances": [{"name": "a", "type": "server",
                                    "spec": {"imageRef": IMAGE, "flavorRef": "m9.nope"}}]}))
    other_project = run("vclusters", "show", active, project="tenant-b")
    unknown_volume = run("volumes", "show", "00000000-0000-0000-0000-000000000000")

    for result in (unknown, no_member, other_project, unknown_volume):
        assert result.exit_code == 1 and "404" in result.output, result.output
        assert "Traceback" not in result.output and result.output.startswith("Error: ")
    assert bad_flavor.exit_code == 1 and "400" in bad_flavor.output
    assert "m9.nope" in bad_flavor.output
    assert run_json(run, "vclusters", "list") != []


def test_files_the_cli_refuses_before_asking(run, write, runs):
    not_json = run("vclusters", "create", "-f", write("db.json", "{nope"))
    not_xml = run("vclusters", "create", "-f", write("db.xml", "<vcluster"), "--name", "x")
    xml_add = run("vclusters", "add", "vc-1", "-f", write("more.xml", TWO_SERVERS_APART_XML))
    empty_add = run("vclusters", "add", "vc-1", "-f", write("more.json", {}))
    missing = run("vclusters", "create", "-f", "no-such-file.json")

    for result in (not_json, not_xml, xml_add, empty_add, missing):
        assert result.exit_code == 2, result.output
    assert "not JSON" in not_json.output and "not XML" in not_xml.output
    assert runs == []


# -- the client and the loop on their own -----------------------------------------------


def test_watch_takes_a_cluster_gone_as_deleted():
    """A teardown that ends with the cluster no longer shown (404) ended DELETED."""
    from fleetflow.api.client import FleetflowApiError
    from fleetflow.cli import vclusters as vclusters_cli

    class ScriptedClient:
        def __init__(self):
            self.answers = [{"id": "vc-1", "status": "DELETING"}, None]

        def get_vcluster(self, vcluster_id):
            answer = self.answers.pop(0)
            if answer is None:
                raise FleetflowApiError(404, [{"code": "fleetflow.not_found"}])
            return answer

    final = vclusters_cli.watch(ScriptedClient(), "vc-1", 0.01, live=False,
                                gone_is_deleted=True)

    assert final["status"] == "DELETED"
    with pytest.raises(FleetflowApiError):
        vclusters_cli.watch(ScriptedClient(), "vc-1", 0.01, live=False)


def test_a_dry_run_verdict_is_read_bare_or_wrapped():
    from fleetflow.api.client_vclusters import _verdict

    verdict = {"fits": False, "explanation": "no room", "instances": [], "groupings": []}

    assert _verdict(verdict) is verdict
    assert _verdict({"dry_run": verdict}) is verdict
    assert _verdict({"vcluster": verdict}) is verdict
