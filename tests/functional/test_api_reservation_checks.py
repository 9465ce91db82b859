"""Reservations refuse at once what their flow could never do, and a dry run says the same.

A request the scheduler cannot parse is a 400 on a dry run and on a real
POST alike (nothing written, no flow posted), as it is wherever capability
requirements are accepted: server groups and virtual cluster servers. A
reservation chooses what a final failure does (``on_error``), from the API
and the CLI.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetflow.persistence.models import Instance, Reservation, ServerGroup

URL = "/v2/tenant-a/reservations"


@pytest.fixture
def api_services(recording_services):
    return recording_services


def row_count(db, model) -> int:
    with db.session() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(model))


def nothing_written(db, jobs) -> bool:
    return (jobs == [] and row_count(db, Reservation) == 0
            and row_count(db, Instance) == 0)


def details(response) -> str:
    return " ".join(e["detail"] for e in response.json["errors"])


@pytest.fixture
def reserve(client, member_headers, sample_catalog):
    def _reserve(query="", **fields):
        fields.setdefault("flavor_ref", "m1.small")
        fields.setdefault("image_ref", "cirros")
        return client.post(URL + query, json={"reservation": fields}, headers=member_headers)

    return _reserve


# -- capability requirements ------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "?dry_run=true"])
@pytest.mark.parametrize("wanted, problem", [
    (">= lots", "needs a number"),
    (">=", "needs an operand"),
])
def test_a_malformed_capability_is_400_on_post_and_dry_run_alike(reserve, jobs, db, query,
                                                                wanted, problem):
    response = reserve(count=1, capabilities={"cores": wanted}, query=query)

    assert response.status_code == 400, response.json
    assert "'reservation.capabilities.cores'" in details(response)
    assert problem in details(response)
    assert nothing_written(db, jobs)


def test_a_group_with_a_malformed_capability_is_refused(client, member_headers, db):
    body = {"group": {"name": "gpu", "policies": ["host-capabilities"],
                      "capabilities": {"cores": ">= lots"}}}
    response = client.post("/v2/tenant-a/groups", json=body, headers=member_headers)

    assert response.status_code == 400, response.json
    assert "'group.capabilities.cores'" in details(response)
    assert row_count(db, ServerGroup) == 0


def test_a_group_update_with_a_malformed_capability_is_refused(client, member_headers, db):
    created = client.post("/v2/tenant-a/groups", json={"group": {"name": "g"}},
                          headers=member_headers).json["group"]
    response = client.put(f"/v2/tenant-a/groups/{created['id']}",
                          json={"group": {"capabilities": {"ram": "< "}}},
                          headers=member_headers)

    assert response.status_code == 400, response.json
    assert "'group.capabilities.ram'" in details(response)


def test_a_vcluster_server_with_a_malformed_capability_is_refused(client, member_headers,
                                                                  sample_catalog):
    body = {"vcluster": {"name": "db", "groupings": [], "instances": [
        {"name": "s1", "type": "server",
         "spec": {"imageRef": "cirros", "flavorRef": "m1.small",
                  "capabilities": {"cores": ">= lots"}}}]}}
    response = client.post("/v2/tenant-a/vclusters", json=body, headers=member_headers)

    assert response.status_code == 400, response.json
    assert "'vcluster.instances.0.spec.capabilities.cores'" in details(response)


# -- data volumes -------------------------------------------------------------------------


def test_volume_gb_above_what_a_volume_row_holds_is_400(reserve, jobs, db):
    response = reserve(count=1, volume_gb=2**31)

    assert response.status_code == 400, response.json
    assert "'reservation.volume_gb'" in details(response)
    assert nothing_written(db, jobs)


def test_dry_run_counts_the_volume_each_instance_needs(reserve, jobs, db, sample_catalog):
    from fleetflow.persistence import fleet
    from fleetflow.persistence.models import Host, StorageBackend

    with db.session() as session:
        for host in session.scalars(sa.select(Host)):
            host.inventory = {**host.inventory, "DISK_GB": {"total": 2000}}
        session.add(StorageBackend(uuid="00000000-0000-0000-0000-0000000000b1",
                                   name="na-1-r1-storage", scope="rack", region="north-america",
                                   zone="na-1", rack="r1", capacity_gb=50000,
                                   volume_types=["ssd"]))
        session.flush()
        fleet.register_providers(session)

    fits = reserve(count=1, volume_gb=50000, query="?dry_run=true").json["dry_run"]
    too_big = reserve(count=1, volume_gb=100000, query="?dry_run=true").json["dry_run"]

    assert fits["fits"] is True and fits["hosts"] == {"host-001": 1}
    assert too_big["fits"] is False
    assert ("storage: 3 -> 0 (100000 GB volumes: at most 50000 GB free on a reachable "
            "backend)") in too_big["explanation"]
    assert nothing_written(db, jobs)


# -- on_error ---------------------------------------------------------------------------


def test_on_error_defaults_to_revert_and_pause_is_posted_with_the_flow(reserve, jobs):
    assert reserve(count=1).status_code == 202
    assert reserve(count=1, on_error="pause").status_code == 202

    assert [options["on_error"] for _name, _kwargs, options in jobs] == ["revert", "pause"]


def test_an_unknown_on_error_is_400(reserve, jobs, db):
    response = reserve(count=1, on_error="continue")

    assert response.status_code == 400
    assert "'reservation.on_error'" in details(response)
    assert nothing_written(db, jobs)


def test_an_idempotency_key_replayed_with_another_on_error_is_422(client, member_headers,
                                                                  sample_catalog, jobs):
    headers = {**member_headers, "Idempotency-Key": "k-1"}
    body = {"count": 1, "flavor_ref": "m1.small", "image_ref": "cirros"}
    first = client.post(URL, json={"reservation": body}, headers=headers)
    again = client.post(URL, json={"reservation": body}, headers=headers)
    other = client.post(URL, json={"reservation": {**body, "on_error": "pause"}},
                        headers=headers)

    assert (first.status_code, again.status_code) == (202, 202)
    assert other.status_code == 422 and "on_error" in details(other)
    assert len(jobs) == 1


def test_the_cli_asks_for_pause(live_server, sample_catalog, jobs):
    from click.testing import CliRunner

    from fleetflow.cli.main import cli

    result = CliRunner().invoke(cli, ["--url", live_server, "--project", "tenant-a",
                                      "--roles", "member", "reserve", "--count", "1",
                                      "--flavor", "m1.small", "--on-error", "pause",
                                      "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    ((_name, _kwargs, options),) = jobs
    assert options["on_error"] == "pause"
    refused = CliRunner().invoke(cli, ["--url", live_server, "reserve", "--count", "1",
                                       "--flavor", "m1.small",
                                       "--on-error", "skip"])
    assert refused.exit_code == 2 and "'skip' is not one of" in refused.output
