"""A server's metadata (Nova's ``/servers/{id}/metadata``), a reservation's metadata on
its servers, ``fleetflow servers set|unset``, and the per-project choice of the servers
automatic recovery moves (``/v2/admin/recoveries/projects/{project}``)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetflow.cli.main import cli
from fleetflow.common import states
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Instance
from fleetflow.services.recovery import policy
from fleetflow.services.recovery.ops import RecoveryOps
from fleetflow.services.reservations import ReservationOps, ReservationRequest

URL = "/v2/tenant-a/servers"


@pytest.fixture
def operations(conf, db, jobs):
    return ReservationOps(conf, db, submit=lambda *args, **kwargs: "flow")


@pytest.fixture
def api_services(conf, db, operations):
    return {"reservations": operations, "recoveries": RecoveryOps(conf, db)}


@pytest.fixture
def make_servers(operations, sample_catalog):
    def _make(count=2, tenant="tenant-a", metadata=None):
        req = ReservationRequest(tenant_id=tenant, user_id=None, flavor_ref="m1.small",
                                 image_ref="cirros", min_count=count, max_count=count,
                                 metadata=metadata or {})
        reservation, _ = operations.reserve(req)
        with sample_catalog.session() as session:
            return rows.instance_ids(session, reservation.id)

    return _make


def test_put_replaces_post_merges_delete_removes_a_key(client, member_headers,
                                                       reader_headers, make_servers):
    [server] = make_servers(1)
    path = f"{URL}/{server}/metadata"
    assert client.get(path, headers=reader_headers).json == {"metadata": {}}
    put = client.put(path, headers=member_headers,
                     json={"metadata": {"ha": "true", "owner": "ops"}})
    assert put.status_code == 200, put.json
    assert put.json == {"metadata": {"ha": "true", "owner": "ops"}}
    merged = client.post(path, headers=member_headers,
                         json={"metadata": {"recovery_priority": "5", "owner": "db"}})
    assert merged.json == {"metadata": {"ha": "true", "owner": "db",
                                        "recovery_priority": "5"}}
    assert client.put(path, headers=member_headers,
                      json={"metadata": {"recovery": "never"}}).json == {
        "metadata": {"recovery": "never"}}
    assert client.delete(f"{path}/recovery", headers=member_headers).status_code == 204
    assert client.delete(f"{path}/recovery", headers=member_headers).status_code == 404
    shown = client.get(f"{URL}/{server}", headers=reader_headers).json["server"]
    assert shown["metadata"] == {}
    # A reader sees it and may not change it.
    assert client.post(path, headers=reader_headers,
                       json={"metadata": {"a": "b"}}).status_code == 403


def test_unknown_or_foreign_servers_answer_404_and_bad_bodies_400(
        client, member_headers, make_servers, db):
    [server] = make_servers(1)
    [foreign] = make_servers(1, tenant="tenant-b")
    body = {"metadata": {"ha": "true"}}
    for missing in ("not-a-uuid", "00000000-0000-4000-8000-000000000000", foreign):
        for method in (client.get, client.put, client.post):
            kwargs = {} if method is client.get else {"json": body}
            answer = method(f"{URL}/{missing}/metadata", headers=member_headers, **kwargs)
            assert answer.status_code == 404, (missing, answer.json)
    path = f"{URL}/{server}/metadata"
    for bad in ({"metadata": {"k": 1}}, {"metadata": {"": "v"}}, {"metadata": ["x"]},
                {"metadata": {"k" * 256: "v"}}, {"metadata": {"k": "v" * 256}},
                {"metadata": {f"k{n}": "v" for n in range(129)}}, {"meta": {}}, {}):
        answer = client.post(path, headers=member_headers, json=bad)
        assert answer.status_code == 400, (bad, answer.json)
    # A merge may not take the metadata beyond the bound either: nothing is written.
    assert client.put(path, headers=member_headers, json={
        "metadata": {f"a{n}": "v" for n in range(128)}}).status_code == 200
    assert client.post(path, headers=member_headers,
                       json={"metadata": {"one": "more"}}).status_code == 400
    assert len(client.get(path, headers=member_headers).json["metadata"]) == 128
    with db.session() as session:
        session.get(Instance, server).status = states.DELETED
    assert client.get(path, headers=member_headers).status_code == 404
    # Another project's path is refused before the server is looked up.
    assert client.get(f"/v2/tenant-b/servers/{server}/metadata",
                      headers=member_headers).status_code == 403


def test_a_reservation_s_metadata_is_on_each_of_its_servers(client, member_headers, db,
                                                            sample_catalog):
    answer = client.post("/v2/tenant-a/reservations", headers=member_headers, json={
        "reservation": {"count": 2, "flavor_ref": "m1.small", "image_ref": "cirros",
                        "metadata": {"ha": "true", "recovery_priority": "3"}}})
    assert answer.status_code == 202, answer.json
    servers = client.get(f"{URL}?reservation_id={answer.json['reservation']['id']}",
                         headers=member_headers).json["servers"]
    assert [s["metadata"] for s in servers] == [{"ha": "true", "recovery_priority": "3"}] * 2
    refused = client.post("/v2/tenant-a/reservations", headers=member_headers, json={
        "reservation": {"count": 1, "flavor_ref": "m1.small", "image_ref": "cirros",
                        "metadata": {"ha": True}}})
    assert refused.status_code == 400, refused.json
    with db.session() as session:
        assert session.query(Instance).count() == 2  # the refused one wrote nothing


def _cli(url, *args):
    return CliRunner().invoke(cli, ["--url", url, "--project", "tenant-a", "--roles",
                                    "member", *args])


def test_cli_sets_and_unsets_properties(live_server, make_servers):
    [server] = make_servers(1)
    url = live_server
    result = _cli(url, "servers", "set", server, "--property", "ha=true",
                  "--property", "recovery_priority=7")
    assert result.exit_code == 0, result.output
    assert "ha=true, recovery_priority=7" in result.output
    result = _cli(url, "servers", "unset", server, "--property", "ha")
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("recovery_priority=7")
    assert "recovery_priority=7" in _cli(url, "servers", "show", server).output
    assert _cli(url, "servers", "set", server, "--property", "novalue").exit_code != 0
    assert _cli(url, "servers", "unset", server, "--property", "ha").exit_code != 0
    result = _cli(url, "reserve", "--count", "1", "--flavor", "m1.small", "--property",
                  "ha=true", "--property", "recovery=never", "--json")
    assert result.exit_code == 0, result.output
    listed = _cli(url, "servers", "list", "--reservation", json.loads(result.output)["id"],
                  "--json")
    [made] = json.loads(listed.output)
    assert made["metadata"] == {"ha": "true", "recovery": "never"}


def test_an_admin_chooses_a_project_s_servers(client, admin_headers, member_headers, conf,
                                             db, make_servers):
    base = "/v2/admin/recoveries/projects"
    assert client.get(f"{base}/tenant-a", headers=admin_headers).json["project"] == {
        "project_id": "tenant-a", "servers": "all", "reason": None, "user_id": None,
        "updated_at": None, "default": True}
    assert client.put(f"{base}/tenant-a", headers=member_headers,
                      json={"project": {"servers": "none"}}).status_code == 403
    assert client.put(f"{base}/tenant-a", headers=admin_headers,
                      json={"project": {"servers": "some"}}).status_code == 400
    assert client.put(f"{base}/{'p' * 65}", headers=admin_headers,
                      json={"project": {"servers": "ha"}}).status_code == 400
    set_ = client.put(f"{base}/tenant-a", headers=admin_headers,
                      json={"project": {"servers": "ha", "reason": "pets only"}})
    assert set_.status_code == 200, set_.json
    assert set_.json["project"]["servers"] == "ha" and not set_.json["project"]["default"]
    assert [p["project_id"] for p in client.get(base, headers=admin_headers).json[
        "projects"]] == ["tenant-a"]

    plain, marked, never = make_servers(3)
    for server, metadata in ((marked, {"ha": "true"}), (never, {"ha": "true",
                                                               "recovery": "never"})):
        client.put(f"{URL}/{server}/metadata", headers=member_headers,
                   json={"metadata": metadata})
    [other] = make_servers(1, tenant="tenant-b")
    with db.session() as session:
        for uuid in (plain, marked, never, other):
            session.get(Instance, uuid).status = states.ACTIVE
            session.get(Instance, uuid).host = "z1-r1-h01"
    with db.read_session() as session:
        moving, staying = policy.servers(session, conf, ["z1-r1-h01"])
    assert sorted(moving) == sorted([marked, other])
    assert staying == {plain: "not ha=true (its project's recovery is ha)",
                       never: "recovery=never"}

    client.put(f"{base}/tenant-a", headers=admin_headers, json={"project": {"servers": "none"}})
    with db.read_session() as session:
        moving, staying = policy.servers(session, conf, ["z1-r1-h01"])
    assert moving == [other] and staying[marked] == "its project's recovery is none"
    cleared = client.delete(f"{base}/tenant-a", headers=admin_headers)
    assert cleared.json["project"]["default"] is True
    with db.read_session() as session:
        moving, _staying = policy.servers(session, conf, ["z1-r1-h01"])
    assert sorted(moving) == sorted([plain, marked, other])
