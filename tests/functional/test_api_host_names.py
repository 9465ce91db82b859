"""One rule, ``servers:show_host``, decides who sees host names, in every view.

On the small cloud: a reservation of two servers and a vcluster whose servers
s1 and s2 share a host while s3 is on another, and whose volumes are on two
backends. By default a member of the project sees every name; once the policy
file restricts the rule to administrators, a member sees no host, backend,
rack, zone or region name anywhere in any answer (JSON or XML), only opaque
``host_id``s, while an administrator still sees the names.
"""

from __future__ import annotations

import re

import pytest

from fleetflow.api.hosts_view import opaque_id
from tests.functional.host_names import fleet_names, names_in, restrict_show_host
from tests.functional.test_api_vclusters import grouping, server, settle, volume

T = "/v2/tenant-a"
HEX_ID = re.compile(r"[0-9a-f]{56}")
CLUSTER = {
    "name": "spread",
    "instances": [server("s1"), server("s2"), server("s3"), volume("v1"), volume("v2")],
    "groupings": [grouping("together", ["s1", "s2"], "affinity"),
                  grouping("apart", ["s1", "s3"], "anti-affinity"),
                  grouping("one-zone", ["s1", "s3"], "affinity", scope="zone"),
                  grouping("disks-apart", ["v1", "v2"], "anti-affinity")],
}
RESERVATION = {"count": 2, "flavor_ref": "m1.small", "image_ref": "cirros"}


@pytest.fixture
def reserving(small_cloud, api_services, conf, db):
    """Reservations posted through the API run on the small cloud (ask before ``app``)."""
    from fleetflow.common import ids
    from fleetflow.services.reservations import ReservationOps

    def record(flow_name, flow_kwargs, store=None, flow_id=None, **_):
        small_cloud.posted.append((flow_name, flow_kwargs, store))
        return flow_id or ids.new_uuid()

    api_services["reservations"] = ReservationOps(conf, db, submit=record)
    return small_cloud


@pytest.fixture
def built(reserving, client, member_headers):
    """The cluster and the reservation, built and settled; their ids."""
    cluster = client.post(f"{T}/vclusters", json={"vcluster": CLUSTER}, headers=member_headers)
    reservation = client.post(f"{T}/reservations", json={"reservation": RESERVATION},
                              headers=member_headers)
    assert cluster.status_code == reservation.status_code == 202
    assert set(settle(reserving)) == {"SUCCESS"}
    return cluster.json["vcluster"]["id"], reservation.json["reservation"]["id"]


def views(client, headers, built) -> dict[str, object]:
    """Every answer that could name a place, by what was asked."""
    vcluster_id, reservation_id = built
    servers = client.get(f"{T}/servers", headers=headers).json
    shown = {s["id"]: client.get(f"{T}/servers/{s['id']}", headers=headers).json
             for s in servers["servers"]}
    xml = client.get(f"{T}/vclusters/{vcluster_id}",
                     headers={**headers, "Accept": "application/xml"})
    assert xml.status_code == 200 and xml.mimetype == "application/xml"
    answers = {
        "servers": servers, "server": shown,
        "reservation": client.get(f"{T}/reservations/{reservation_id}", headers=headers).json,
        "reservations": client.get(f"{T}/reservations", headers=headers).json,
        "vcluster": client.get(f"{T}/vclusters/{vcluster_id}", headers=headers).json,
        "vclusters": client.get(f"{T}/vclusters", headers=headers).json,
        "vcluster xml": xml.get_data(as_text=True),
        "reservation dry run": client.post(f"{T}/reservations?dry_run=true",
                                           json={"reservation": RESERVATION},
                                           headers=headers).json,
        "vcluster dry run": client.post(f"{T}/vclusters?dry_run=true",
                                        json={"vcluster": {**CLUSTER, "name": "again"}},
                                        headers=headers).json,
    }
    for name, answer in answers.items():
        assert "errors" not in answer, (name, answer)
    return answers


def members(answers: dict, key: str = "vcluster") -> dict[str, dict]:
    return {m["name"]: m for m in answers[key][key if key == "vcluster" else "dry_run"]
            ["instances"]}


def host_ids(answers: dict) -> dict[str, str]:
    """Server id -> host_id, from every view that shows one, checked to agree."""
    found: dict[str, set] = {}
    for body in answers["server"].values():
        found.setdefault(body["server"]["id"], set()).add(body["server"]["host_id"])
    for item in answers["servers"]["servers"]:
        found.setdefault(item["id"], set()).add(item["host_id"])
    for item in answers["reservation"]["reservation"]["instances"]:
        found.setdefault(item["id"], set()).add(item["host_id"])
    for item in answers["vcluster"]["vcluster"]["instances"]:
        if item["type"] == "server":
            found.setdefault(item["id"], set()).add(item["host_id"])
    assert all(len(ids) == 1 for ids in found.values()), found
    return {server_id: ids.pop() for server_id, ids in found.items()}


def check_separation(answers: dict) -> None:
    """host_ids say which servers share a host, whatever the caller may see."""
    cluster = members(answers)
    assert all(HEX_ID.fullmatch(m["host_id"]) for m in cluster.values())
    assert cluster["s1"]["host_id"] == cluster["s2"]["host_id"]
    assert cluster["s1"]["host_id"] != cluster["s3"]["host_id"]
    assert cluster["v1"]["host_id"] != cluster["v2"]["host_id"]
    domains = {g["name"]: g["domains"] for g in answers["vcluster"]["vcluster"]["groupings"]}
    assert domains["together"]["s1"] == domains["together"]["s2"]
    assert domains["apart"]["s1"] != domains["apart"]["s3"]
    assert domains["one-zone"]["s1"] == domains["one-zone"]["s3"]
    assert domains["disks-apart"]["v1"] != domains["disks-apart"]["v2"]
    planned = members(answers, "vcluster dry run")
    assert planned["s1"]["host_id"] == planned["s2"]["host_id"] != planned["s3"]["host_id"]


def test_by_default_a_member_sees_the_names_and_the_host_ids(built, small_cloud, client,
                                                              member_headers, admin_headers,
                                                              db, assert_audit_clean):
    names = fleet_names(db)

    mine = views(client, member_headers, built)
    admin = views(client, admin_headers, built)

    assert mine == admin
    check_separation(mine)
    for server_id, host_id in host_ids(mine).items():
        host = mine["server"][server_id]["server"]["host"]
        assert host in names and host_id == opaque_id("tenant-a", host)
    cluster = members(mine)
    assert cluster["v1"]["backend"] in names and cluster["s3"]["host"] in names
    assert set(mine["reservation dry run"]["dry_run"]["hosts"]) <= names
    assert names_in(mine, names)
    assert_audit_clean(db, small_cloud.placement, small_cloud.compute)


def test_restricted_a_member_sees_no_name_anywhere_only_host_ids(
        built, small_cloud, client, member_headers, admin_headers, conf, db,
        assert_audit_clean):
    names = fleet_names(db)
    before = views(client, admin_headers, built)

    restrict_show_host(conf)
    mine = views(client, member_headers, built)
    admin = views(client, admin_headers, built)

    assert names_in(mine, names) == set()
    assert admin == before and names_in(admin, names)
    check_separation(mine)
    # The same ids as an administrator's: the project's, not the caller's.
    assert host_ids(mine) == host_ids(admin)
    for body in mine["server"].values():
        assert body["server"]["host"] is None
        assert all(HEX_ID.fullmatch(h) for h in body["server"]["hosts_tried"])
    cluster = members(mine)
    assert cluster["s1"]["host"] is None and cluster["v1"]["backend"] is None
    planned = mine["reservation dry run"]["dry_run"]
    assert planned["fits"] and all(HEX_ID.fullmatch(h) for h in planned["hosts"])
    assert all(m.get("host") is None and m.get("backend") is None
               for m in members(mine, "vcluster dry run").values())
    assert_audit_clean(db, small_cloud.placement, small_cloud.compute)


def test_the_api_document_describes_host_id(client):
    schemas = client.get("/openapi.json").get_json()["components"]["schemas"]

    described = {name: schema["properties"]["host_id"] for name, schema in schemas.items()
                 if "host_id" in schema.get("properties", {})}

    assert {"Server", "ReservationInstance", "VClusterMember", "VClusterDryRunMember"} <= set(
        described)
    assert all("hostId" in field["description"] and field["readOnly"]
               for field in described.values())


def test_a_flow_failure_names_no_place_to_a_caller_refused_the_rule(
        app, sample_catalog, conf, member_headers, admin_headers):
    from fleetflow.api.flows.schemas import FailureSchema

    failure = {"type": "ComputeError", "step": "0000-boot",
               "message": "build_instance on host host-002 failed: rack r2 is dark"}

    def dump(headers):
        with app.test_request_context(f"{T}/flows/f-1", headers=headers):
            app.preprocess_request()
            return FailureSchema().dump(failure)

    assert dump(member_headers) == failure
    restrict_show_host(conf)
    assert dump(member_headers)["message"] == (
        f"build_instance on host {opaque_id('tenant-a', 'host-002')} failed: rack "
        f"{opaque_id('tenant-a', 'r2')} is dark")
    assert dump(admin_headers) == failure
