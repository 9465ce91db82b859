"""Quotas: administrators set them at /v2/admin/quotas/{tenant}; projects read their own."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Quota, Reservation, Volume

ADMIN_URL = "/v2/admin/quotas/tenant-a"
OWN_URL = "/v2/tenant-a/quotas"
NO_USAGE = {"instances": 0, "vcpus": 0, "ram_mb": 0, "volumes": 0, "gigabytes": 0}


@pytest.fixture
def api_services(recording_services):
    return recording_services


def reserve(client, headers, count, flavor="m1.small"):
    return client.post("/v2/tenant-a/reservations", headers=headers, json={
        "reservation": {"count": count, "flavor_ref": flavor, "image_ref": "cirros"}})


def test_defaults_come_from_the_configuration(client, admin_headers, conf):
    conf.set_override("vcpus", 123, group="quota")

    quota = client.get(ADMIN_URL, headers=admin_headers).json["quota"]

    assert quota == {"tenant_id": "tenant-a", "instances": conf.quota.instances,
                     "vcpus": 123, "ram_mb": conf.quota.ram_mb,
                     "volumes": conf.quota.volumes, "gigabytes": conf.quota.gigabytes,
                     "default": True, "usage": NO_USAGE}
    assert (conf.quota.volumes, conf.quota.gigabytes) == (1000, 100000)


def test_admin_sets_and_reads_a_quota(client, admin_headers, conf):
    response = client.put(ADMIN_URL, headers=admin_headers,
                          json={"quota": {"instances": 5, "vcpus": 10, "ram_mb": 4096}})

    assert response.status_code == 200
    expected = {"tenant_id": "tenant-a", "instances": 5, "vcpus": 10, "ram_mb": 4096,
                "volumes": conf.quota.volumes, "gigabytes": conf.quota.gigabytes,
                "default": False, "usage": NO_USAGE}
    assert response.json["quota"] == expected
    assert client.get(ADMIN_URL, headers=admin_headers).json["quota"] == expected
    # Another project is untouched.
    other = client.get("/v2/admin/quotas/tenant-b", headers=admin_headers).json["quota"]
    assert other["default"] is True and other["instances"] == conf.quota.instances


def test_a_limit_not_given_keeps_its_value(client, admin_headers):
    client.put(ADMIN_URL, headers=admin_headers,
               json={"quota": {"instances": 5, "vcpus": 10, "ram_mb": 4096}})

    quota = client.put(ADMIN_URL, headers=admin_headers,
                       json={"quota": {"vcpus": -1}}).json["quota"]

    assert (quota["instances"], quota["vcpus"], quota["ram_mb"]) == (5, -1, 4096)


@pytest.mark.parametrize("document, named", [
    ({"quota": {}}, "'quota'"),
    ({"quota": {"instances": -2}}, "'quota.instances'"),
    ({"quota": {"instances": "lots"}}, "'quota.instances'"),
    ({"quota": {"gpus": 1}}, "'quota.gpus'"),
    ({"quota": {"volumes": -2}}, "'quota.volumes'"),
    ({"quota": {"gigabytes": -2}}, "'quota.gigabytes'"),
    ({"quota": {"volumes": "lots"}}, "'quota.volumes'"),
    ({"instances": 1}, "'quota'"),
])
def test_invalid_quota_bodies_are_400(client, admin_headers, document, named):
    response = client.put(ADMIN_URL, headers=admin_headers, json=document)

    assert response.status_code == 400
    assert named in " ".join(e["detail"] for e in response.json["errors"])
    assert client.get(ADMIN_URL, headers=admin_headers).json["quota"]["default"] is True


def test_only_administrators_use_the_admin_routes(client, member_headers, make_headers):
    body = {"quota": {"instances": 1000000}}

    assert client.put(ADMIN_URL, headers=member_headers, json=body).status_code == 403
    assert client.get(ADMIN_URL, headers=member_headers).status_code == 403
    other = make_headers("tenant-b", "member")
    assert client.put(ADMIN_URL, headers=other, json=body).status_code == 403


def test_a_project_reads_its_own_quota_with_usage(client, admin_headers, reader_headers,
                                                  member_headers, make_headers,
                                                  sample_catalog):
    client.put(ADMIN_URL, headers=admin_headers, json={"quota": {"instances": 7}})
    assert reserve(client, member_headers, 3).status_code == 202

    quota = client.get(OWN_URL, headers=reader_headers).json["quota"]

    assert quota["instances"] == 7 and quota["default"] is False
    # m1.small: 1 vcpu, 2048 MB each.
    assert quota["usage"] == {"instances": 3, "vcpus": 3, "ram_mb": 6144,
                              "volumes": 0, "gigabytes": 0}
    assert client.get(OWN_URL, headers=make_headers("tenant-b", "member")).status_code == 403


def test_a_lowered_quota_refuses_new_reservations_before_anything_is_written(
        client, admin_headers, member_headers, sample_catalog, jobs, db):
    assert reserve(client, member_headers, 2).status_code == 202
    client.put(ADMIN_URL, headers=admin_headers, json={"quota": {"instances": 3}})

    refused = reserve(client, member_headers, 2)

    assert refused.status_code == 403
    assert refused.json["errors"][0]["code"] == "fleetflow.quota_exceeded"
    assert len(jobs) == 1
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Reservation)) == 1
    assert reserve(client, member_headers, 1).status_code == 202


def test_deleted_and_reverted_instances_free_the_quota(client, admin_headers, member_headers,
                                                       sample_catalog, db):
    client.put(ADMIN_URL, headers=admin_headers, json={"quota": {"instances": 2}})
    rid = reserve(client, member_headers, 2).json["reservation"]["id"]
    assert reserve(client, member_headers, 1).status_code == 403
    with db.session() as session:
        rows.update_instances(session, rows.instance_ids(session, rid),
                              status=states.REVERTED)

    assert reserve(client, member_headers, 2).status_code == 202


def test_admin_sets_volume_limits_like_the_others(client, admin_headers, conf):
    response = client.put(ADMIN_URL, headers=admin_headers,
                          json={"quota": {"volumes": 4, "gigabytes": -1}})

    assert response.status_code == 200
    quota = response.json["quota"]
    assert (quota["volumes"], quota["gigabytes"], quota["default"]) == (4, -1, False)
    # The others keep the defaults they had.
    assert (quota["instances"], quota["vcpus"], quota["ram_mb"]) == (
        conf.quota.instances, conf.quota.vcpus, conf.quota.ram_mb)
    assert client.get(ADMIN_URL, headers=admin_headers).json["quota"] == quota

    quota = client.put(ADMIN_URL, headers=admin_headers,
                       json={"quota": {"gigabytes": 500}}).json["quota"]

    assert (quota["volumes"], quota["gigabytes"]) == (4, 500)


def test_volume_limits_not_set_follow_the_defaults(client, admin_headers, conf, db):
    client.put(ADMIN_URL, headers=admin_headers, json={"quota": {"instances": 5}})
    conf.set_override("volumes", 7, group="quota")
    conf.set_override("gigabytes", 70, group="quota")

    quota = client.get(ADMIN_URL, headers=admin_headers).json["quota"]

    assert (quota["instances"], quota["volumes"], quota["gigabytes"]) == (5, 7, 70)
    assert quota["default"] is False
    with db.session() as session:
        row = session.get(Quota, "tenant-a")
        assert (row.volumes, row.gigabytes) == (None, None)


def test_the_usage_counts_live_volumes_and_their_sizes(client, admin_headers, reader_headers,
                                                       db):
    with db.session() as session:
        for index, (size, status) in enumerate([(10, states.VOLUME_AVAILABLE),
                                                (20, states.VOLUME_IN_USE),
                                                (40, states.VOLUME_CREATING),
                                                (80, states.VOLUME_ERROR),
                                                (160, states.VOLUME_DELETED)]):
            session.add(Volume(id=f"v-{index}", tenant_id="tenant-a", size_gb=size,
                               status=status))
        session.add(Volume(id="v-other", tenant_id="tenant-b", size_gb=1000,
                           status=states.VOLUME_AVAILABLE))

    usage = client.get(OWN_URL, headers=reader_headers).json["quota"]["usage"]

    assert (usage["volumes"], usage["gigabytes"]) == (4, 150)
    assert client.get(ADMIN_URL, headers=admin_headers).json["quota"]["usage"] == usage
