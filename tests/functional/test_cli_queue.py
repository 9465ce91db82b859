"""``fleetflow queue`` and the ``--queue`` options of ``reserve`` and ``vclusters create``,
against a real API server thread. The catalog has no host up: whatever is queued waits.
Flows are recorded, not run (nothing is admitted here)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetflow.cli.main import cli
from fleetflow.persistence import queue as queue_rows
from fleetflow.services.queue import admission


@pytest.fixture
def api_services(recording_services, sample_catalog):
    return recording_services


@pytest.fixture
def run(live_server):
    """Run ``fleetflow --url <server> --project P --roles R ARGS``; returns the result."""
    def _run(*args, project="tenant-a", roles="member,reader"):
        return CliRunner().invoke(cli, ["--url", live_server, "--project", project,
                                        "--roles", roles, *args], catch_exceptions=False)

    return _run


def run_json(run, *args, **identity):
    result = run(*args, "--json", **identity)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_queue_lists_waiting_reservations_and_clusters_in_order(run, tmp_path, conf, db, jobs,
                                                                recording_services):
    first = run_json(run, "reserve", "--count", "2", "--flavor", "m1.small", "--queue",
                     "--queue-timeout", "600")
    urgent = run_json(run, "reserve", "--count", "1", "--flavor", "m1.small", "--queue",
                      "--priority", "4")
    cluster_file = tmp_path / "job.json"
    cluster_file.write_text(json.dumps({"vcluster": {"name": "job", "instances": [
        {"name": "node-1", "type": "server",
         "spec": {"imageRef": "cirros", "flavorRef": "m1.small"}}]}}))
    cluster = run_json(run, "vclusters", "create", "-f", str(cluster_file), "--queue",
                       "--priority", "1")
    assert [first["status"], urgent["status"], cluster["status"]] == ["QUEUED"] * 3
    assert jobs == []  # queued: no flow yet
    admission.run_pass(conf, db, {
        queue_rows.KIND_RESERVATION: recording_services["reservations"],
        queue_rows.KIND_VCLUSTER: recording_services["vclusters"]})

    waiting = run_json(run, "queue", project="admin", roles="admin")
    assert [(w["kind"], w["id"], w["position"]) for w in waiting] == [
        ("reservation", urgent["id"], 1), ("vcluster", cluster["id"], 2),
        ("reservation", first["id"], 3)]
    assert all(w["why"] for w in waiting)
    # --roles given, even as the default value, is who acts: a member is refused.
    refused = run("queue", project="admin", roles="member,reader")
    assert refused.exit_code != 0 and "403" in refused.output, refused.output
    assert waiting[2]["deadline"] is not None

    table = run("queue", project="admin", roles="admin")
    assert table.exit_code == 0, table.output
    assert "3 waiting" in table.output and cluster["id"] in table.output
    shown = run("vclusters", "show", cluster["id"])
    assert "queue position" in shown.output and "2 (1 ahead)" in shown.output

    cancelled = run_json(run, "reservations", "delete", first["id"])
    assert cancelled["status"] == "DELETED"
    assert [w["id"] for w in run_json(run, "queue", project="admin", roles="admin")] == [
        urgent["id"], cluster["id"]]


@pytest.mark.parametrize("command", [
    ("reserve", "--count", "1", "--flavor", "m1.small", "--priority", "2"),
    ("vclusters", "create", "-f", "{file}", "--queue-timeout", "5"),
])
def test_queue_fields_without_queue_are_a_usage_error(run, tmp_path, command):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"name": "job", "instances": []}))
    result = run(*(part.format(file=path) for part in command))
    assert result.exit_code == 2
    assert "go with --queue" in result.output
