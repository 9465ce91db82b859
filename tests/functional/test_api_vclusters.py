"""/v2/{tenant_id}/vclusters in JSON against the real VClusterOps on the small cloud.

The small cloud has four hosts in two racks, each rack with a shared ``ssd``
backend. The service posts its jobs to ``small_cloud.posted``; :func:`settle`
runs them to their end on TaskFlow's serial engine (what a conductor does),
so a test sees what the API answers while a job waits and once it has run.
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
import taskflow.engines

from fleetflow.common import states
from fleetflow.flows import registry
from fleetflow.persistence.models import ServerGroup, VCluster, Volume

URL = "/v2/tenant-a/vclusters"
SETTLED = {"ACTIVE", "ERROR", "REVERTED", "DELETED", "PAUSED"}


def server(name: str, **spec) -> dict:
    return {"name": name, "type": "server",
            "spec": {"imageRef": "cirros", "flavorRef": "1", **spec}}


def volume(name: str, size: int = 10, **spec) -> dict:
    return {"name": name, "type": "volume", "spec": {"size": size, "volume_type": "ssd",
                                                      **spec}}


def grouping(name: str, members: list[str], rule: str, **spec) -> dict:
    return {"name": name, "membersRef": members, "spec": {"rule": rule, **spec}}


SERVER_WITH_VOLUME = {"name": "db", "instances": [server("db-server-1"), volume("db-vol-1")],
            "groupings": [grouping("group-1", ["db-server-1", "db-vol-1"], "affinity")]}
TWO_SERVERS_APART = {
    "name": "db",
    "instances": [server("db-server-1"), server("db-server-2"), volume("db-vol-1"),
                  volume("db-vol-2")],
    "groupings": [grouping("group-1", ["db-server-1", "db-vol-1"], "affinity"),
                  grouping("group-2", ["db-server-2", "db-vol-2"], "affinity"),
                  grouping("group-3", ["db-server-1", "db-server-2"], "anti-affinity"),
                  grouping("group-4", ["db-vol-1", "db-vol-2"], "anti-affinity")],
}


def settle(cloud) -> list[str]:
    """Run every job posted so far, in order; their final flow states."""
    ran = []
    while cloud.posted:
        flow_name, kwargs, store = cloud.posted.pop(0)
        engine = taskflow.engines.load(registry.build(flow_name, **kwargs),
                                       store=dict(store or {}), engine="serial")
        try:
            engine.run()
        except Exception:  # noqa: BLE001 - a reverted flow raises; its state says so
            pass
        ran.append(engine.storage.get_flow_state())
    return ran


def wait(cloud, client, headers, url: str, timeout: float = 60.0) -> dict:
    """Run what was posted and poll ``url`` as a client would, until the cluster settles."""
    deadline = time.monotonic() + timeout
    while True:
        settle(cloud)
        body = client.get(url, headers=headers).json["vcluster"]
        if body["status"] in SETTLED:
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def members(view: dict) -> dict[str, dict]:
    return {m["name"]: m for m in view["instances"]}


def details(response) -> str:
    return " ".join(e["detail"] for e in response.json["errors"])


def vcluster_count(db) -> int:
    with db.session() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(VCluster))


@pytest.fixture
def post(small_cloud, client, member_headers):
    """POST a vcluster body (the inner object); returns the response."""
    def _post(body: dict, headers=None, query: str = ""):
        return client.post(URL + query, json={"vcluster": body},
                           headers=headers or member_headers)

    return _post


@pytest.fixture
def build(post, small_cloud, client, member_headers):
    """POST a body and wait until it settles; returns the shown cluster."""
    def _build(body: dict) -> dict:
        response = post(body)
        assert response.status_code == 202, response.json
        return wait(small_cloud, client, member_headers, response.headers["Location"])

    return _build


# -- create -------------------------------------------------------------------------


def test_a_server_with_its_volume_builds_both(post, small_cloud, client,
                                                             member_headers):
    response = post(SERVER_WITH_VOLUME)

    assert response.status_code == 202
    accepted = response.json["vcluster"]
    assert accepted["id"].startswith("vc-") and accepted["status"] == "PENDING"
    assert accepted["links"] == [{"rel": "self", "href": response.headers["Location"]}]
    assert response.headers["Location"].endswith(f"{URL}/{accepted['id']}")
    assert [job[0] for job in small_cloud.posted] == ["vcluster-build"]
    view = wait(small_cloud, client, member_headers, response.headers["Location"])
    assert view["status"] == "ACTIVE" and view["name"] == "db"
    assert set(view) == {"id", "name", "status", "flow_id", "created_at", "updated_at",
                         "progress", "instances", "groupings", "fault", "queue"}
    assert view["queue"] is None  # set while QUEUED only
    assert view["progress"] == {"total": 2, "active": 2, "building": 0, "error": 0}
    found = members(view)
    assert found["db-server-1"]["host"].startswith("z1-")
    assert "backend" not in found["db-server-1"] and "host" not in found["db-vol-1"]
    assert found["db-vol-1"]["backend"].endswith("-shared")
    assert found["db-vol-1"]["attached_to"] == "db-server-1"
    assert found["db-vol-1"]["status"] == states.VOLUME_IN_USE
    (group,) = view["groupings"]
    assert group["satisfied"] is True and group["membersRef"] == ["db-server-1", "db-vol-1"]
    assert set(group["domains"]) == {"db-server-1", "db-vol-1"}


def test_two_servers_apart_with_their_volumes_keep_every_grouping(build, db):
    view = build(TWO_SERVERS_APART)

    assert view["status"] == "ACTIVE", view["fault"]
    found = members(view)
    assert found["db-server-1"]["host"] != found["db-server-2"]["host"]
    assert found["db-vol-1"]["backend"] != found["db-vol-2"]["backend"]
    # Each server sits in the rack of its volume's shared backend.
    for i in (1, 2):
        rack = found[f"db-server-{i}"]["host"].rsplit("-", 1)[0]
        assert found[f"db-vol-{i}"]["backend"] == f"{rack}-shared"
        assert found[f"db-vol-{i}"]["attached_to"] == f"db-server-{i}"
    assert [(g["name"], g["rule"], g["satisfied"]) for g in view["groupings"]] == [
        ("group-1", "affinity", True), ("group-2", "affinity", True),
        ("group-3", "anti-affinity", True), ("group-4", "anti-affinity", True)]
    with db.session() as session:
        assert session.scalars(sa.select(ServerGroup.policies).where(
            ServerGroup.vcluster_id == view["id"])).all() == [["anti-affinity"]]


def test_a_build_out_of_hosts_reverts_with_the_fault(post, small_cloud, client,
                                                    member_headers):
    for host in ("z1-r1-h01", "z1-r1-h02", "z1-r2-h01", "z1-r2-h02"):
        small_cloud.driver.set_faults(host, fail_next=5)
    response = post(SERVER_WITH_VOLUME)

    view = wait(small_cloud, client, member_headers, response.headers["Location"])

    assert view["status"] == "REVERTED"
    assert set(view["fault"]) <= {"code", "message", "step", "host"}
    assert view["fault"]["code"] and view["fault"]["message"]
    assert all(set(m["fault"] or {}) <= {"code", "message", "step", "host"}
               for m in view["instances"])


def test_dry_run_places_every_member_and_writes_nothing(post, small_cloud, db):
    response = post(TWO_SERVERS_APART, query="?dry_run=true")

    assert response.status_code == 200, response.json
    verdict = response.json["dry_run"]
    assert verdict["fits"] is True and verdict["explanation"] is None
    found = members(verdict)
    assert found["db-server-1"]["host"] != found["db-server-2"]["host"]
    assert found["db-vol-1"]["backend"] != found["db-vol-2"]["backend"]
    assert found["db-vol-1"]["attached_to"] == "db-server-1"
    assert all(g["satisfied"] for g in verdict["groupings"])
    assert small_cloud.posted == [] and vcluster_count(db) == 0


def test_dry_run_explains_why_it_does_not_fit(post):
    body = {"name": "wide", "instances": [server(f"s{i}") for i in range(5)],
            "groupings": [grouping("spread", [f"s{i}" for i in range(5)], "anti-affinity")]}

    verdict = post(body, query="?dry_run=true").json["dry_run"]

    assert verdict["fits"] is False
    assert "spread" in verdict["explanation"]


def test_dry_run_still_validates(post):
    response = post({**SERVER_WITH_VOLUME, "instances": [server("a", flavorRef="nope")]},
                    query="?dry_run=true")

    assert response.status_code == 400
    assert "flavor" in details(response)


# -- validation ---------------------------------------------------------------------


def _with(**changes) -> dict:
    return {**SERVER_WITH_VOLUME, **changes}


@pytest.mark.parametrize("body, field", [
    (_with(name=""), "vcluster.name"),
    (_with(name="x" * 256), "vcluster.name"),
    (_with(name="nul\x00"), "vcluster.name"),
    (_with(instances=[server("a", flavorRef="1\x00")]), "vcluster.instances.0.spec.flavorRef"),
    ({"instances": SERVER_WITH_VOLUME["instances"]}, "vcluster.name"),
    (_with(instances=[]), "vcluster.instances"),
    (_with(instances={"a": 1}), "vcluster.instances"),
    (_with(colour="blue"), "vcluster.colour"),
    (_with(instances=[{"name": "a", "type": "disk", "spec": {}}]), "vcluster.instances.0.type"),
    (_with(instances=[{"name": "", "type": "server", "spec": {}}]), "vcluster.instances.0.name"),
    (_with(instances=[{"name": "a", "type": "server"}]), "vcluster.instances.0.spec"),
    (_with(instances=[{"name": "a", "type": "server", "spec": None}]),
     "vcluster.instances.0.spec"),
    (_with(instances=[{"name": "a", "type": "server", "spec": {"imageRef": "cirros"}}]),
     "vcluster.instances.0.spec.flavorRef"),
    (_with(instances=[server("a", size=1)]), "vcluster.instances.0.spec.size"),
    (_with(instances=[server("a", gpu="true")]), "vcluster.instances.0.spec.gpu"),
    (_with(instances=[server("a", capabilities={"gpu": ["x"]})]),
     "vcluster.instances.0.spec.capabilities.gpu.value"),
    (_with(instances=[volume("v", size=0)]), "vcluster.instances.0.spec.size"),
    (_with(instances=[volume("v", size="ten")]), "vcluster.instances.0.spec.size"),
    (_with(instances=[volume("v", size=10.5)]), "vcluster.instances.0.spec.size"),
    (_with(instances=[volume("v", size=2**31)]), "vcluster.instances.0.spec.size"),
    (_with(instances=[{"name": "v", "type": "volume", "spec": {"volume_type": "ssd"}}]),
     "vcluster.instances.0.spec.size"),
    (_with(instances=[volume("v", flavorRef="1")]), "vcluster.instances.0.spec.flavorRef"),
    (_with(instances=[volume("v", volume_type=7)]), "vcluster.instances.0.spec.volume_type"),
    (_with(groupings=[grouping("g", ["db-server-1"], "together")]),
     "vcluster.groupings.0.spec.rule"),
    (_with(groupings=[grouping("g", ["db-server-1"], "affinity", scope="region")]),
     "vcluster.groupings.0.spec.scope"),
    (_with(groupings=[grouping("g", [], "affinity")]), "vcluster.groupings.0.membersRef"),
    (_with(groupings=[{"name": "g", "spec": {"rule": "affinity"}}]),
     "vcluster.groupings.0.membersRef"),
    (_with(groupings=[grouping("", ["db-server-1"], "affinity")]), "vcluster.groupings.0.name"),
])
def test_invalid_bodies_are_400_naming_the_field(post, small_cloud, db, body, field):
    response = post(body)

    assert response.status_code == 400, response.json
    assert f"'{field}'" in details(response)
    assert small_cloud.posted == [] and vcluster_count(db) == 0


@pytest.mark.parametrize("instances, groupings, words", [
    ([server("a"), server("b")],
     [grouping("together", ["a", "b"], "affinity"), grouping("apart", ["a", "b"],
                                                             "anti-affinity")], "apart"),
    ([server("a")], [grouping("g", ["a", "ghost"], "affinity")], "ghost"),
    ([volume("v", attachTo="w"), volume("w")], [], "is a volume"),
    ([volume("v", attachTo="nobody")], [], "nobody"),
    ([server("a"), server("a")], [], "duplicate"),
    ([server("a"), server("b")], [grouping("g", ["a", "b"], "affinity", scope="backend")],
     "scope"),
    ([server("a", flavorRef="nope")], [], "flavor"),
    ([server("a", imageRef="nope")], [], "image"),
    ([volume("v", volume_type="gold")], [], "gold"),
    ([server("a", capabilities={"cores": ">="})], [], "cores"),
])
def test_what_the_cloud_refuses_is_400_before_anything_is_written(
        post, small_cloud, db, instances, groupings, words):
    response = post({"name": "x", "instances": instances, "groupings": groupings})

    assert response.status_code == 400, response.json
    assert words in details(response)
    assert small_cloud.posted == [] and vcluster_count(db) == 0


def test_member_and_grouping_counts_are_bounded(post, conf, small_cloud, db):
    conf.set_override("max_reservation_count", 2, group="api")

    three = post({"name": "x", "instances": [server("a"), server("b"), server("c")]})
    groupings = [grouping(f"g{i}", ["a"], "affinity") for i in range(3)]
    many = post({"name": "x", "instances": [server("a")], "groupings": groupings})

    assert three.status_code == 400 and "'vcluster.instances'" in details(three)
    assert many.status_code == 400 and "'vcluster.groupings'" in details(many)
    assert vcluster_count(db) == 0


@pytest.mark.parametrize("limits, body", [
    ({"gigabytes": 15}, TWO_SERVERS_APART),
    ({"volumes": 1}, TWO_SERVERS_APART),
    ({"instances": 1}, TWO_SERVERS_APART),
])
def test_quota_is_403_before_anything_is_written(post, client, admin_headers, small_cloud,
                                                 db, limits, body):
    set_quota = client.put("/v2/admin/quotas/tenant-a", headers=admin_headers,
                           json={"quota": limits})
    assert set_quota.status_code == 200

    response = post(body)

    assert response.status_code == 403
    assert response.json["errors"][0]["code"] == "fleetflow.quota_exceeded"
    assert small_cloud.posted == [] and vcluster_count(db) == 0
    assert post(body, query="?dry_run=true").status_code == 403


# -- Idempotency-Key ----------------------------------------------------------------


def test_idempotency_key_replays_the_first_vcluster(post, member_headers, small_cloud, db):
    headers = {**member_headers, "Idempotency-Key": "order-7"}
    first = post(SERVER_WITH_VOLUME, headers=headers)
    again = post(SERVER_WITH_VOLUME, headers={**member_headers, "Idempotency-Key": '"order-7"'})

    assert first.status_code == again.status_code == 202
    assert again.json == first.json
    assert again.headers["Location"] == first.headers["Location"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert len(small_cloud.posted) == 1 and vcluster_count(db) == 1


def test_idempotency_key_with_another_body_is_422(post, member_headers, small_cloud, db):
    headers = {**member_headers, "Idempotency-Key": "order-8"}
    post(SERVER_WITH_VOLUME, headers=headers)

    renamed = post({**SERVER_WITH_VOLUME, "name": "other"}, headers=headers)
    regrouped = post({**SERVER_WITH_VOLUME, "groupings": []}, headers=headers)

    assert renamed.status_code == regrouped.status_code == 422
    assert renamed.json["errors"][0]["code"] == "fleetflow.idempotency_key_reused"
    assert "name" in details(renamed) and "groupings" in details(regrouped)
    assert len(small_cloud.posted) == 1 and vcluster_count(db) == 1


def test_too_long_idempotency_key_is_400(post, member_headers, db):
    response = post(SERVER_WITH_VOLUME, headers={**member_headers, "Idempotency-Key": "k" * 256})

    assert response.status_code == 400 and "Idempotency-Key" in details(response)
    assert vcluster_count(db) == 0


# -- list and show ------------------------------------------------------------------


def test_list_is_paginated_newest_first_and_filtered_by_status(build, post, client,
                                                               member_headers):
    built = build(SERVER_WITH_VOLUME)
    pending = [post({**SERVER_WITH_VOLUME, "name": f"p{i}"}).json["vcluster"]["id"]
               for i in range(2)]

    page = client.get(f"{URL}?limit=2", headers=member_headers).json
    assert [v["id"] for v in page["vclusters"]] == [pending[1], pending[0]]
    assert "instances" not in page["vclusters"][0]
    # Counted per cluster: the pending ones' members are all still to build.
    assert [v["progress"] for v in page["vclusters"]] == [
        {"total": 2, "active": 0, "building": 2, "error": 0}] * 2
    (link,) = page["links"]
    rest = client.get(link["href"], headers=member_headers).json
    assert [v["id"] for v in rest["vclusters"]] == [built["id"]] and rest["links"] == []
    oldest = rest["vclusters"][0]
    assert oldest["progress"] == {"total": 2, "active": 2, "building": 0, "error": 0}
    assert oldest["links"] == [{"rel": "self", "href": f"http://localhost{URL}/{built['id']}"}]

    listed = client.get(f"{URL}?status=PENDING", headers=member_headers).json["vclusters"]
    assert [v["id"] for v in listed] == pending[::-1]


@pytest.mark.parametrize("query, field", [
    ("status=HAPPY", "status"), ("limit=0", "limit"), ("marker=vc-000000000000", "marker")])
def test_bad_list_queries_are_400(small_cloud, client, member_headers, query, field):
    response = client.get(f"{URL}?{query}", headers=member_headers)

    assert response.status_code == 400
    assert f"'{field}'" in details(response)


def test_unknown_vcluster_is_404(small_cloud, client, member_headers):
    response = client.get(f"{URL}/vc-000000000000", headers=member_headers)

    assert response.status_code == 404
    assert response.json["errors"][0]["code"] == "fleetflow.not_found"


def test_another_tenants_vcluster_is_404(post, client, make_headers, admin_headers,
                                         small_cloud):
    vcluster_id = post(SERVER_WITH_VOLUME).json["vcluster"]["id"]
    settle(small_cloud)
    other = make_headers("tenant-b", "member", "reader")
    theirs = f"/v2/tenant-b/vclusters/{vcluster_id}"

    assert client.get(theirs, headers=other).status_code == 404
    assert client.put(theirs, json={"vcluster": {"name": "x"}}, headers=other).status_code == 404
    assert client.post(f"{theirs}/instances", json={"instances": [server("x")]},
                       headers=other).status_code == 404
    assert client.delete(f"{theirs}/instances/db-vol-1", headers=other).status_code == 404
    assert client.delete(theirs, headers=other).status_code == 404
    assert client.get("/v2/tenant-b/vclusters", headers=other).json["vclusters"] == []
    # The owner's path is refused to them outright; an administrator may use it.
    assert client.get(f"{URL}/{vcluster_id}", headers=other).status_code == 403
    shown = client.get(f"{URL}/{vcluster_id}", headers=admin_headers)
    assert shown.status_code == 200 and shown.json["vcluster"]["status"] == "ACTIVE"
    assert small_cloud.posted == []


def test_a_reader_may_look_but_not_change(post, client, reader_headers, small_cloud):
    vcluster_id = post(SERVER_WITH_VOLUME).json["vcluster"]["id"]
    item = f"{URL}/{vcluster_id}"

    assert client.get(URL, headers=reader_headers).status_code == 200
    assert client.get(item, headers=reader_headers).status_code == 200
    assert client.post(URL, json={"vcluster": SERVER_WITH_VOLUME},
                       headers=reader_headers).status_code == 403
    assert client.put(item, json={"vcluster": {"name": "x"}},
                      headers=reader_headers).status_code == 403
    assert client.post(f"{item}/instances", json={"instances": [server("x")]},
                       headers=reader_headers).status_code == 403
    assert client.delete(f"{item}/instances/db-vol-1",
                         headers=reader_headers).status_code == 403
    assert client.delete(item, headers=reader_headers).status_code == 403
    assert len(small_cloud.posted) == 1


# -- rename, add, remove, delete ----------------------------------------------------


def test_rename_answers_the_shown_cluster(build, client, member_headers):
    view = build(SERVER_WITH_VOLUME)
    item = f"{URL}/{view['id']}"

    response = client.put(item, json={"vcluster": {"name": "renamed"}}, headers=member_headers)

    assert response.status_code == 200
    assert response.json["vcluster"] == {**view, "name": "renamed",
                                         "updated_at": response.json["vcluster"]["updated_at"]}
    assert client.get(item, headers=member_headers).json["vcluster"]["name"] == "renamed"
    for body in ({"vcluster": {"name": ""}}, {"vcluster": {}},
                 {"vcluster": {"name": "x", "status": "ACTIVE"}}):
        assert client.put(item, json=body, headers=member_headers).status_code == 400
    assert client.put(f"{URL}/vc-000000000000", json={"vcluster": {"name": "x"}},
                      headers=member_headers).status_code == 404


def test_add_members_then_remove_one(build, client, member_headers, small_cloud):
    view = build(TWO_SERVERS_APART)
    item = f"{URL}/{view['id']}"

    added = client.post(f"{item}/instances", headers=member_headers, json={
        "instances": [server("db-server-3"), volume("db-vol-3")],
        "groupings": [grouping("group-5", ["db-server-3", "db-vol-3"], "affinity"),
                      grouping("group-3", ["db-server-3"], "anti-affinity")]})

    assert added.status_code == 202, added.json
    assert added.json["vcluster"]["status"] == "UPDATING"
    assert added.json["vcluster"]["links"] == [{"rel": "self",
                                                "href": f"http://localhost{item}"}]
    # One run at a time: a change asked meanwhile is refused.
    busy = client.delete(f"{item}/instances/db-vol-1", headers=member_headers)
    assert busy.status_code == 409
    view = wait(small_cloud, client, member_headers, item)
    found = members(view)
    assert view["status"] == "ACTIVE" and view["progress"]["total"] == 6
    assert len({found[f"db-server-{i}"]["host"] for i in (1, 2, 3)}) == 3
    assert found["db-vol-3"]["attached_to"] == "db-server-3"
    assert all(g["satisfied"] for g in view["groupings"]), view["groupings"]

    removed = client.delete(f"{item}/instances/db-server-1", headers=member_headers)

    assert removed.status_code == 202
    assert removed.json["vcluster"]["status"] == "UPDATING"
    view = wait(small_cloud, client, member_headers, item)
    found = members(view)
    assert view["status"] == "ACTIVE" and "db-server-1" not in found
    assert found["db-vol-1"]["attached_to"] is None
    group_3 = next(g for g in view["groupings"] if g["name"] == "group-3")
    assert group_3["membersRef"] == ["db-server-2", "db-server-3"]


def test_a_member_whose_name_holds_a_slash_can_be_removed(build, client, member_headers,
                                                          small_cloud):
    view = build({"name": "slashes", "instances": [server("db/primary"), server("db/replica")],
                  "groupings": []})
    item = f"{URL}/{view['id']}"

    removed = client.delete(f"{item}/instances/db/replica", headers=member_headers)

    assert removed.status_code == 202, removed.json
    view = wait(small_cloud, client, member_headers, item)
    assert [m["name"] for m in view["instances"]] == ["db/primary"]


def test_update_errors(build, post, client, member_headers, small_cloud):
    view = build(SERVER_WITH_VOLUME)
    item = f"{URL}/{view['id']}"

    def add(document):
        return client.post(f"{item}/instances", json=document, headers=member_headers)

    unknown = client.delete(f"{item}/instances/ghost", headers=member_headers)
    assert unknown.status_code == 404 and "ghost" in details(unknown)
    clash = add({"instances": [server("db-server-2")],
                 "groupings": [grouping("group-1", ["db-server-2"], "anti-affinity")]})
    assert clash.status_code == 400 and "group-1" in details(clash)
    ghost = add({"instances": [server("db-server-2")],
                 "groupings": [grouping("g", ["db-server-2", "ghost"], "affinity")]})
    assert ghost.status_code == 400 and "ghost" in details(ghost)
    taken = add({"instances": [server("db-server-1")]})
    assert taken.status_code == 400 and "db-server-1" in details(taken)
    for document, field in (({}, "instances"), ({"instances": []}, "instances"),
                            ({"instances": [server("x")], "name": "y"}, "name"),
                            ({"vcluster": {"instances": [server("x")]}}, "vcluster")):
        response = add(document)
        assert response.status_code == 400 and f"'{field}'" in details(response)
    assert small_cloud.posted == []

    pending = post({**SERVER_WITH_VOLUME, "name": "later"}).json["vcluster"]["id"]
    later = f"{URL}/{pending}"
    not_yet = client.post(f"{later}/instances", json={"instances": [server("x")]},
                          headers=member_headers)
    assert not_yet.status_code == 409 and "PENDING" in details(not_yet)
    assert client.delete(f"{later}/instances/db-vol-1", headers=member_headers).status_code \
        == 409
    assert client.delete(later, headers=member_headers).status_code == 409


def test_groupings_alone_are_added_over_the_members(build, client, member_headers,
                                                    small_cloud):
    view = build({"name": "two", "instances": [server("a"), server("b")]})
    item = f"{URL}/{view['id']}"

    response = client.post(f"{item}/instances", headers=member_headers, json={
        "instances": [], "groupings": [grouping("apart", ["a", "b"], "anti-affinity")]})

    assert response.status_code == 202, response.json
    view = wait(small_cloud, client, member_headers, item)
    assert view["status"] == "ACTIVE"
    assert [(g["name"], g["satisfied"]) for g in view["groupings"]] == [("apart", True)]


def test_delete_takes_the_cluster_down(build, client, member_headers, small_cloud, db):
    view = build(TWO_SERVERS_APART)
    item = f"{URL}/{view['id']}"

    response = client.delete(item, headers=member_headers)

    assert response.status_code == 202
    assert response.json["vcluster"]["status"] == "DELETING"
    gone = wait(small_cloud, client, member_headers, item)
    assert gone["status"] == "DELETED"
    assert {m["status"] for m in gone["instances"]} == {states.DELETED}
    # Deleting again answers the deleted cluster and posts nothing.
    again = client.delete(item, headers=member_headers)
    assert again.status_code == 202 and again.json["vcluster"]["status"] == "DELETED"
    assert small_cloud.posted == []
    assert client.put(item, json={"vcluster": {"name": "x"}},
                      headers=member_headers).status_code == 404
    with db.session() as session:
        assert set(session.scalars(sa.select(Volume.status).where(
            Volume.vcluster_id == view["id"]))) == {states.VOLUME_DELETED}
    deleted = client.get(f"{URL}?status=DELETED", headers=member_headers).json["vclusters"]
    assert [v["id"] for v in deleted] == [view["id"]]


def test_the_list_counts_a_deleted_clusters_progress_once(build, post, client,
                                                          member_headers, small_cloud, db):
    gone = build(SERVER_WITH_VOLUME)["id"]
    assert client.delete(f"{URL}/{gone}", headers=member_headers).status_code == 202
    assert wait(small_cloud, client, member_headers, f"{URL}/{gone}")["status"] == "DELETED"
    pending = post({**SERVER_WITH_VOLUME, "name": "next"}).json["vcluster"]["id"]
    asked = []

    def count_asks(conn, cursor, statement, parameters, context, executemany):
        if "count(" in statement and "vcluster_members" in statement:
            asked.append(sorted({p for p in parameters if str(p).startswith("vc-")}))
    sa.event.listen(db.engine, "before_cursor_execute", count_asks)
    try:
        first, second = (client.get(URL, headers=member_headers).json["vclusters"]
                         for _ in range(2))
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", count_asks)

    assert first == second
    progress = {v["id"]: v["progress"] for v in first}
    # The deleted cluster's members were counted: they are DELETED, none active.
    assert progress[gone] == {"total": 2, "active": 0, "building": 0, "error": 0}
    assert progress[pending] == {"total": 2, "active": 0, "building": 2, "error": 0}
    # Counted once, then only the cluster whose members can still change.
    assert asked == [sorted([gone, pending]), [pending]]


# -- OpenAPI ------------------------------------------------------------------------


def test_openapi_documents_the_routes(client):
    spec = client.get("/openapi.json").get_json()
    paths = spec["paths"]
    base = "/v2/{tenant_id}/vclusters"

    post = paths[base]["post"]
    assert {"200", "202", "400"} <= set(post["responses"])
    assert [p["name"] for p in post["parameters"]] == ["dry_run", "Idempotency-Key",
                                                     "X-User-Id"]
    assert set(paths[f"{base}/{{vcluster_id}}"]) >= {"get", "put", "delete", "parameters"}
    assert "post" in paths[f"{base}/{{vcluster_id}}/instances"]
    assert "delete" in paths[f"{base}/{{vcluster_id}}/instances/{{member_name}}"]
    assert "get" in paths["/v2/{tenant_id}/volumes/{volume_id}"]
    schemas = spec["components"]["schemas"]
    spec_fields = schemas["VClusterMemberSpec"]["properties"]
    assert set(spec_fields) == {"imageRef", "flavorRef", "capabilities", "size",
                                "volume_type", "attachTo"}
    assert schemas["VClusterGroupingSpec"]["properties"]["rule"]["enum"] == [
        "affinity", "anti-affinity"]
    assert "backend" in schemas["Volume"]["properties"]



# -- PostgreSQL ---------------------------------------------------------------------


def test_postgresql_retries_race_to_one_vcluster_and_long_names_fit(pg_url, make_conf):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from fleetflow.api.app import create_app
    from fleetflow.persistence.db import Database
    from fleetflow.persistence.models import Flavor, Image
    from fleetflow.services.vclusters import VClusterOps

    conf = make_conf(database={"connection": pg_url})
    database = Database(pg_url)
    database.upgrade()
    with database.session() as session:
        session.add_all([Flavor(id="1", name="m1.small", vcpus=1, ram_mb=2048, disk_gb=20,
                                extra_specs={}),
                         Image(id="33333333-3333-3333-3333-333333333333", name="cirros",
                               min_disk_gb=1, min_ram_mb=64)])
    posted = []
    service = VClusterOps(conf, database, submit=lambda *a, **kw: posted.append(a))
    app = create_app(conf, database=database, services={"vclusters": service})
    start = threading.Barrier(8)
    headers = {"X-Project-Id": "tenant-a", "X-Roles": "member"}
    body = {"name": "pair", "instances": [server("a"), server("b")],
            "groupings": [grouping("apart", ["a", "b"], "anti-affinity")]}

    def post(_):
        client = app.test_client()
        start.wait()
        return client.post(URL, headers={**headers, "Idempotency-Key": "same"},
                           json={"vcluster": body})

    try:
        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(post, range(8)))
        assert [r.status_code for r in responses] == [202] * 8, [r.json for r in responses]
        assert len({r.json["vcluster"]["id"] for r in responses}) == 1
        assert len(posted) == 1

        # Each name is valid, and so is the pair: the server group named after
        # both is cut to its column's size.
        long = {**body, "name": "n" * 200,
                "groupings": [grouping("g" * 100, ["a", "b"], "anti-affinity")]}
        response = app.test_client().post(URL, headers=headers, json={"vcluster": long})
        assert response.status_code == 202, response.json
        assert len(posted) == 2 and vcluster_count(database) == 2
    finally:
        database.dispose()
