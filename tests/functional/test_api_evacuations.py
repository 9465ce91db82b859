"""/v2/admin/evacuations and /v2/admin/hosts/{name}/evacuate over the Flask test client.

The services are the real EvacuationOps and HostOps on a four-host simulated
cloud (``small_cloud``); only the job poster records what it is handed, so no
flow runs and each test says exactly which runs were posted, and that a
refused request posted none and wrote nothing.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import evacuations as rows
from fleetflow.persistence.models import Evacuation, Host, Instance, Move
from fleetflow.services.evacuations import MAX_PARALLEL_LIMIT
from tests.functional.host_names import restrict_show_host

URL = "/v2/admin/evacuations"
SOURCE = "z1-r1-h01"
OTHER = "z1-r1-h02"


@pytest.fixture
def jobs():
    """Every run the API posted: (flow name, flow kwargs, submit options)."""
    return []


@pytest.fixture
def cloud(small_cloud, api_services, conf, db, jobs):
    from fleetflow.services.evacuations import EvacuationOps
    from fleetflow.services.hosts import HostOps

    def submit(flow_name, flow_kwargs, **options):
        jobs.append((flow_name, flow_kwargs, options))
        return options.get("flow_id") or "flow"

    hosts = HostOps(conf, db, small_cloud.placement.store, small_cloud.compute)
    api_services.update(hosts=hosts, evacuations=EvacuationOps(
        conf, db, submit, compute=small_cloud.compute, on_host_state=hosts.sync_placement))
    return small_cloud


@pytest.fixture
def client(cloud, app):
    """The test client of an app built after the cloud's services were added."""
    return app.test_client()


def details(response) -> str:
    return " ".join(e["detail"] for e in response.json["errors"])


def code(response) -> str:
    return response.json["errors"][0]["code"]


def written(db) -> tuple[int, int]:
    """(evacuation rows, move rows)."""
    with db.session() as session:
        return (session.scalar(sa.select(sa.func.count()).select_from(Evacuation)),
                session.scalar(sa.select(sa.func.count()).select_from(Move)))


def host_row(db, name) -> Host:
    with db.session() as session:
        return session.scalars(sa.select(Host).where(Host.name == name)).one()


def set_status(db, evacuation_id, status):
    with db.session() as session:
        rows.set_status(session, evacuation_id, status)


@pytest.fixture
def evacuate(client, admin_headers):
    """POST an evacuation of ``hosts`` (live unless told); returns the response."""
    def _evacuate(hosts=(SOURCE,), query="", headers=None, **fields):
        fields.setdefault("mode", "live")
        return client.post(URL + query, json={"evacuation": {"hosts": list(hosts), **fields}},
                           headers=headers or admin_headers)

    return _evacuate


@pytest.fixture
def started(evacuate, cloud):
    """A live evacuation of SOURCE with two servers on it; returns (id, server ids)."""
    servers = sorted([cloud.boot(SOURCE), cloud.boot(SOURCE)])
    response = evacuate()
    assert response.status_code == 202, response.json
    return response.json["evacuation"]["id"], servers


# -- who may -----------------------------------------------------------------------


@pytest.mark.parametrize("method, url, body", [
    ("get", URL, None),
    ("post", URL, {"evacuation": {"hosts": [SOURCE], "mode": "live"}}),
    ("post", URL + "?dry_run=true", {"evacuation": {"hosts": [SOURCE], "mode": "live"}}),
    ("get", f"{URL}/e-000000000000", None),
    ("post", f"{URL}/e-000000000000/resume", {}),
    ("post", f"{URL}/e-000000000000/skip", {"skip": {"instances": ["x"]}}),
    ("post", f"{URL}/e-000000000000/revert", {}),
    ("post", f"/v2/admin/hosts/{SOURCE}/evacuate", {"evacuate": {"mode": "live"}}),
])
def test_every_route_is_for_administrators(client, member_headers, db, jobs, method, url,
                                           body):
    response = getattr(client, method)(url, json=body, headers=member_headers)

    assert response.status_code == 403
    assert code(response) == "fleetflow.forbidden"
    assert written(db) == (0, 0) and jobs == []


# -- validation ----------------------------------------------------------------------


DROP = object()  # a field left out of the body


@pytest.mark.parametrize("fields, field", [
    ({"mode": "teleport"}, "evacuation.mode"),
    ({"mode": None}, "evacuation.mode"),
    ({"mode": DROP}, "evacuation.mode"),
    ({"on_error": "explode"}, "evacuation.on_error"),
    ({"fallback": "warm"}, "evacuation.fallback"),
    ({"hosts": DROP}, "evacuation.hosts"),
    ({"hosts": []}, "evacuation.hosts"),
    ({"hosts": [SOURCE, SOURCE]}, "evacuation.hosts"),
    ({"hosts": [7]}, "evacuation.hosts"),
    ({"hosts": SOURCE}, "evacuation.hosts"),
    ({"hosts": [""]}, "evacuation.hosts"),
    ({"target_hosts": [OTHER, 3]}, "evacuation.target_hosts"),
    ({"target_hosts": [OTHER, OTHER]}, "evacuation.target_hosts"),
    ({"max_parallel": 0}, "evacuation.max_parallel"),
    ({"max_parallel": MAX_PARALLEL_LIMIT + 1}, "evacuation.max_parallel"),
    ({"max_parallel": "8"}, "evacuation.max_parallel"),
    ({"max_parallel": True}, "evacuation.max_parallel"),
    ({"reason": 42}, "evacuation.reason"),
    ({"colour": "red"}, "evacuation.colour"),
    (None, "evacuation"),
])
def test_bad_fields_are_400_naming_the_field(client, admin_headers, cloud, db, jobs, fields,
                                             field):
    cloud.boot(SOURCE)
    body = {"hosts": [SOURCE], "mode": "live"}
    if fields is None:  # the fields without their envelope
        json = body
    else:
        body.update(fields)
        json = {"evacuation": {k: v for k, v in body.items() if v is not DROP}}

    response = client.post(URL, json=json, headers=admin_headers)

    assert response.status_code == 400, response.json
    # The field, or the item of it ('evacuation.hosts.0').
    assert f"'{field}" in details(response)
    assert written(db) == (0, 0) and jobs == []
    assert host_row(db, SOURCE).evacuation_id is None


@pytest.mark.parametrize("fields, field", [
    ({"mode": "teleport"}, "evacuate.mode"),
    ({"mode": "live", "hosts": [OTHER]}, "evacuate.hosts"),
    ({"mode": "live", "max_parallel": -1}, "evacuate.max_parallel"),
])
def test_host_route_validates_the_same_way(client, admin_headers, db, jobs, fields, field):
    response = client.post(f"/v2/admin/hosts/{SOURCE}/evacuate", json={"evacuate": fields},
                           headers=admin_headers)

    assert response.status_code == 400
    assert f"'{field}'" in details(response)
    assert written(db) == (0, 0) and jobs == []


def test_unknown_host_is_404(evacuate, client, admin_headers, db, jobs):
    response = evacuate(hosts=[SOURCE, "z9-r9-h99"])
    one = client.post("/v2/admin/hosts/z9-r9-h99/evacuate",
                      json={"evacuate": {"mode": "live"}}, headers=admin_headers)

    assert response.status_code == one.status_code == 404
    assert "z9-r9-h99" in details(response)
    assert written(db) == (0, 0) and jobs == []
    assert host_row(db, SOURCE).evacuation_id is None


@pytest.mark.parametrize("fields, field", [
    ({"fallback": "cold"}, "fallback"),
    ({"target_hosts": ["z9-r9-h99"]}, "target_hosts"),
    ({"target_hosts": [SOURCE]}, "target_hosts"),
])
def test_requests_the_cloud_refuses_are_400(evacuate, db, jobs, fields, field):
    response = evacuate(**fields)

    assert response.status_code == 400
    assert field in details(response)
    assert written(db) == (0, 0) and jobs == []


# -- dry run ---------------------------------------------------------------------------


def test_dry_run_says_where_each_server_would_go_and_writes_nothing(evacuate, cloud, db,
                                                                    jobs):
    servers = sorted([cloud.boot(SOURCE), cloud.boot(SOURCE)])

    response = evacuate(query="?dry_run=true", target_hosts=[OTHER])

    assert response.status_code == 200, response.json
    verdict = response.json["evacuation"]
    assert verdict["fits"] is True
    assert sorted(i["id"] for i in verdict["instances"]) == servers
    for item in verdict["instances"]:
        assert item["source"] == SOURCE and item["destination"] == OTHER
        assert item["tenant_id"] == "t1" and item["explanation"] is None
    assert written(db) == (0, 0) and jobs == []
    row = host_row(db, SOURCE)
    assert (row.evacuation_id, row.state) == (None, "up")


def test_dry_run_explains_a_server_that_fits_nowhere(evacuate, cloud, db, jobs, client,
                                                     admin_headers):
    server = cloud.boot(SOURCE)
    response = client.post(f"/v2/admin/hosts/{SOURCE}/evacuate?dry_run=true",
                           json={"evacuate": {"mode": "cold", "target_hosts": ["z1-r2-h01"]}},
                           headers=admin_headers)
    # The only allowed destination is closed: nothing fits.
    client.put("/v2/admin/hosts/z1-r2-h01", json={"host": {"state": "disabled"}},
               headers=admin_headers)
    closed = client.post(f"/v2/admin/hosts/{SOURCE}/evacuate?dry_run=true",
                         json={"evacuate": {"mode": "cold", "target_hosts": ["z1-r2-h01"]}},
                         headers=admin_headers)

    assert response.status_code == closed.status_code == 200
    assert response.json["evacuation"]["fits"] is True
    verdict = closed.json["evacuation"]
    assert verdict["fits"] is False
    (item,) = verdict["instances"]
    assert item["id"] == server and item["destination"] is None and item["explanation"]
    assert written(db) == (0, 0) and jobs == []


# -- POST -----------------------------------------------------------------------------


def test_evacuation_is_accepted_with_its_location(evacuate, cloud, client, admin_headers,
                                                  db, jobs):
    servers = sorted([cloud.boot(SOURCE), cloud.boot(SOURCE)])

    response = evacuate(on_error="continue", max_parallel=3, reason="disk swap")

    assert response.status_code == 202, response.json
    evacuation = response.json["evacuation"]
    assert evacuation["id"].startswith("e-") and evacuation["status"] == "PENDING"
    assert evacuation["links"] == [{"rel": "self", "href": response.headers["Location"]}]
    assert response.headers["Location"].endswith(f"{URL}/{evacuation['id']}")
    ((name, kwargs, options),) = jobs
    assert name == "evacuate" and kwargs["evacuation_id"] == evacuation["id"]
    assert kwargs["lanes"] == 3
    assert sorted(options["store"]["instance_uuids"]) == servers
    assert written(db) == (1, 2)
    assert host_row(db, SOURCE).evacuation_id == evacuation["id"]
    shown = client.get(response.headers["Location"], headers=admin_headers)
    assert shown.status_code == 200
    assert shown.json["evacuation"]["reason"] == "disk swap"
    assert shown.json["evacuation"]["on_error"] == "continue"


def test_host_route_evacuates_that_host(client, admin_headers, cloud, db, jobs):
    server = cloud.boot(SOURCE)

    response = client.post(f"/v2/admin/hosts/{SOURCE}/evacuate",
                           json={"evacuate": {"mode": "cold", "target_hosts": [OTHER]}},
                           headers=admin_headers)

    assert response.status_code == 202, response.json
    evacuation_id = response.json["evacuation"]["id"]
    assert response.headers["Location"].endswith(f"{URL}/{evacuation_id}")
    shown = client.get(f"{URL}/{evacuation_id}", headers=admin_headers).json["evacuation"]
    assert shown["hosts"] == [SOURCE] and shown["mode"] == "cold"
    assert shown["target_hosts"] == [OTHER] and shown["max_parallel"] == 8
    assert [i["id"] for i in shown["instances"]] == [server]
    assert len(jobs) == 1


def test_second_evacuation_of_a_held_host_is_409(started, evacuate, db, jobs):
    evacuation_id, _servers = started

    response = evacuate(hosts=[OTHER, SOURCE], mode="cold")

    assert response.status_code == 409
    assert code(response) == "EVACUATION_IN_PROGRESS"
    assert evacuation_id in details(response)
    assert written(db) == (1, 2) and len(jobs) == 1
    # The other host of the refused request was not taken either.
    assert host_row(db, OTHER).evacuation_id is None


@pytest.mark.parametrize("mode", ["live", "drain"])
@pytest.mark.parametrize("status", [states.PENDING, states.BUILDING, states.DELETING])
def test_a_host_with_a_server_not_settled_is_409_and_nothing_is_written(
        evacuate, cloud, db, jobs, assert_audit_clean, status, mode):
    cloud.boot(SOURCE)
    building = cloud.boot(SOURCE, status=status)

    response = evacuate(hosts=[OTHER, SOURCE], mode=mode)

    assert response.status_code == 409, response.json
    assert code(response) == "BUILDS_IN_PROGRESS"
    assert f"host {SOURCE} has 1 server(s)" in details(response)
    assert written(db) == (0, 0) and jobs == []
    for name in (SOURCE, OTHER):
        row = host_row(db, name)
        assert (row.state, row.evacuation_id) == (states.HOST_UP, None)
    with db.session() as session:
        session.get(Instance, building).status = states.ACTIVE
    assert_audit_clean(cloud.database, cloud.placement, cloud.compute,
                       service_down_time=cloud.conf.compute.service_down_time)


@pytest.mark.parametrize("status, step", [(states.MOVING, "move"), (states.PENDING, "claimed")])
def test_a_host_another_evacuation_moves_a_server_into_is_409(started, evacuate, db, jobs,
                                                              status, step):
    evacuation_id, servers = started
    with db.session() as session:
        rows.update_move(session, evacuation_id, servers[0], status=status, step=step,
                         destination=OTHER)

    response = evacuate(hosts=[OTHER], mode="drain")

    assert response.status_code == 409, response.json
    assert code(response) == "BUILDS_IN_PROGRESS"
    assert f"host {OTHER} has 1 server(s)" in details(response)
    assert written(db) == (1, 2) and len(jobs) == 1
    row = host_row(db, OTHER)
    assert (row.state, row.evacuation_id) == (states.HOST_UP, None)


def test_rebuild_only_of_a_down_and_silent_host_which_it_fences(evacuate, client,
                                                                 admin_headers, cloud, db,
                                                                 jobs):
    from fleetflow.services.hosts import DISABLED_TRAIT

    server = cloud.boot(SOURCE)
    up = evacuate(mode="rebuild")
    # The operator's forced down: no need to wait for the heartbeat to go stale.
    client.put(f"/v2/admin/hosts/{SOURCE}", json={"host": {"state": "down"}},
               headers=admin_headers)
    answering = evacuate(mode="rebuild")
    assert up.status_code == answering.status_code == 409
    assert code(up) == code(answering) == "HOST_ALIVE"
    assert written(db) == (0, 0) and jobs == []
    cloud.compute.set_faults(SOURCE, dead=True)

    response = evacuate(mode="rebuild")

    assert response.status_code == 202, response.json
    evacuation_id = response.json["evacuation"]["id"]
    assert jobs[0][2]["store"]["instance_uuids"] == [server]
    row = host_row(db, SOURCE)
    assert (row.state, row.evacuation_id) == ("down", evacuation_id)
    _generation, traits = cloud.placement.store.get_traits(cloud.host_uuid(SOURCE))
    assert DISABLED_TRAIT in traits
    # Held by the evacuation: it cannot be brought back up under it.
    refused = client.put(f"/v2/admin/hosts/{SOURCE}", json={"host": {"state": "up"}},
                         headers=admin_headers)
    assert refused.status_code == 409 and code(refused) == "EVACUATION_IN_PROGRESS"


# -- GET ------------------------------------------------------------------------------


def test_show_has_the_full_shape(started, client, admin_headers, db):
    evacuation_id, (first, second) = started
    with db.session() as session:
        rows.update_move(session, evacuation_id, first, status=states.DONE,
                         destination=OTHER, attempts=1, hosts_tried=[OTHER])
        rows.update_move(session, evacuation_id, second, status=states.FAILED, attempts=2,
                         hosts_tried=["z1-r2-h01", "z1-r2-h02"], step="move",
                         fault={"code": "NO_VALID_HOST", "message": "no host fits",
                                "step": "move", "host": "z1-r2-h02", "time": "now"})
        rows.set_status(session, evacuation_id, states.PAUSED)

    response = client.get(f"{URL}/{evacuation_id}", headers=admin_headers)

    assert response.status_code == 200
    evacuation = response.json["evacuation"]
    assert set(evacuation) >= {"id", "hosts", "mode", "status", "on_error", "flow_id",
                               "reason", "created_at", "updated_at", "progress",
                               "instances", "fault", "max_parallel", "fallback",
                               "target_hosts", "links"}
    assert evacuation["status"] == "PAUSED" and evacuation["hosts"] == [SOURCE]
    assert evacuation["flow_id"] and evacuation["fault"] is None
    assert evacuation["progress"] == {"total": 2, "done": 1, "moving": 0, "pending": 0,
                                      "failed": 1, "skipped": 0, "reverted": 0}
    done, failed = sorted(evacuation["instances"], key=lambda i: i["id"] != first)
    assert set(done) >= {"id", "tenant_id", "source", "destination", "status", "attempts",
                         "hosts_tried", "volumes_lost", "fault", "mode", "step"}
    assert (done["id"], done["status"], done["destination"]) == (first, "DONE", OTHER)
    assert (done["source"], done["tenant_id"], done["fault"]) == (SOURCE, "t1", None)
    assert done["volumes_lost"] == [] and done["mode"] == "live"
    assert failed["fault"] == {"code": "NO_VALID_HOST", "message": "no host fits",
                               "step": "move", "host": "z1-r2-h02"}
    assert failed["hosts_tried"] == ["z1-r2-h01", "z1-r2-h02"] and failed["attempts"] == 2


def test_unknown_evacuation_is_404(client, admin_headers):
    response = client.get(f"{URL}/e-000000000000", headers=admin_headers)

    assert response.status_code == 404 and code(response) == "fleetflow.not_found"


def test_list_is_paginated_and_filtered(evacuate, client, admin_headers, cloud):
    made = []
    for host in ("z1-r1-h01", "z1-r1-h02", "z1-r2-h01"):
        cloud.boot(host)
        made.append(evacuate(hosts=[host]).json["evacuation"]["id"])
    set_status(cloud.database, made[1], states.PAUSED)

    page = client.get(f"{URL}?limit=2", headers=admin_headers)
    assert page.status_code == 200, page.json
    first = page.json
    assert len(first["evacuations"]) == 2
    (link,) = first["links"]
    assert link["rel"] == "next" and "limit=2" in link["href"]
    rest = client.get(link["href"], headers=admin_headers).json
    assert rest["links"] == []
    listed = [e["id"] for e in first["evacuations"] + rest["evacuations"]]
    assert sorted(listed) == sorted(made)
    item = first["evacuations"][0]
    assert "instances" not in item and item["progress"]["total"] == 1
    assert item["links"][0]["href"].endswith(f"{URL}/{item['id']}")

    paused = client.get(f"{URL}?status=PAUSED", headers=admin_headers).json["evacuations"]
    assert [e["id"] for e in paused] == [made[1]]
    of_host = client.get(f"{URL}?host=z1-r2-h01", headers=admin_headers).json["evacuations"]
    assert [e["id"] for e in of_host] == [made[2]]
    both = client.get(f"{URL}?host=z1-r2-h01&status=PAUSED", headers=admin_headers)
    assert both.json["evacuations"] == []
    assert client.get(f"{URL}?status=HAPPY", headers=admin_headers).status_code == 400
    assert client.get(f"{URL}?limit=0", headers=admin_headers).status_code == 400


# -- resume / skip / revert -------------------------------------------------------------


@pytest.mark.parametrize("action, body", [
    ("resume", {}), ("skip", None), ("revert", {})])
@pytest.mark.parametrize("status", [states.PENDING, states.RUNNING, states.DONE])
def test_actions_are_409_unless_paused(started, client, admin_headers, db, jobs, action,
                                       body, status):
    evacuation_id, servers = started
    set_status(db, evacuation_id, status)
    if body is None:
        body = {"skip": {"instances": servers[:1]}}

    response = client.post(f"{URL}/{evacuation_id}/{action}", json=body,
                           headers=admin_headers)

    assert response.status_code == 409, response.json
    assert status in details(response)
    assert len(jobs) == 1


@pytest.mark.parametrize("action, body", [
    ("resume", {}), ("skip", {"skip": {"instances": ["x"]}}), ("revert", {})])
def test_actions_on_an_unknown_evacuation_are_404(client, admin_headers, action, body):
    response = client.post(f"{URL}/e-000000000000/{action}", json=body,
                           headers=admin_headers)

    assert response.status_code == 404


def test_resume_posts_a_run_for_the_unfinished_servers(started, client, admin_headers, db,
                                                       jobs):
    evacuation_id, (first, second) = started
    with db.session() as session:
        rows.update_move(session, evacuation_id, first, status=states.DONE)
        rows.update_move(session, evacuation_id, second, status=states.FAILED)
        rows.set_status(session, evacuation_id, states.PAUSED)

    response = client.post(f"{URL}/{evacuation_id}/resume", json={}, headers=admin_headers)

    assert response.status_code == 202, response.json
    evacuation = response.json["evacuation"]
    assert evacuation["status"] == "PENDING" and evacuation["id"] == evacuation_id
    assert {i["id"]: i["status"] for i in evacuation["instances"]} == {
        first: "DONE", second: "PENDING"}
    assert len(jobs) == 2
    assert jobs[1][2]["store"]["instance_uuids"] == [second]
    assert evacuation["flow_id"] == jobs[1][2]["flow_id"]


def test_skip_marks_servers_and_goes_on_with_the_rest(started, client, admin_headers, db,
                                                      jobs):
    evacuation_id, (first, second) = started
    set_status(db, evacuation_id, states.PAUSED)

    response = client.post(f"{URL}/{evacuation_id}/skip",
                           json={"skip": {"instances": [first]}}, headers=admin_headers)

    assert response.status_code == 202, response.json
    by_id = {i["id"]: i["status"] for i in response.json["evacuation"]["instances"]}
    assert by_id == {first: "SKIPPED", second: "PENDING"}
    assert jobs[-1][2]["store"]["instance_uuids"] == [second]


@pytest.mark.parametrize("action, body, field", [
    ("skip", {"skip": {"instances": []}}, "skip.instances"),
    ("skip", {"skip": {"instances": [5]}}, "skip.instances"),
    ("skip", {"skip": {}}, "skip.instances"),
    ("skip", {}, "skip"),
    ("skip", {"skip": {"instances": ["x"], "why": "no"}}, "skip.why"),
    ("skip", {"skip": {"instances": ["0f0c8a34-5d1e-4c59-9a53-0d2f3e7d6a01"]}},
     "skip.instances"),
    ("resume", {"now": True}, "now"),
    ("revert", {"now": True}, "now"),
])
def test_bad_action_bodies_are_400(started, client, admin_headers, db, jobs, action, body,
                                   field):
    evacuation_id, _servers = started
    set_status(db, evacuation_id, states.PAUSED)

    response = client.post(f"{URL}/{evacuation_id}/{action}", json=body,
                           headers=admin_headers)

    assert response.status_code == 400
    assert field in details(response)
    assert len(jobs) == 1


def test_skipping_the_same_server_twice_is_a_400_naming_it(started, client, admin_headers,
                                                           db, jobs):
    evacuation_id, (first, _second) = started
    set_status(db, evacuation_id, states.PAUSED)

    response = client.post(f"{URL}/{evacuation_id}/skip",
                           json={"skip": {"instances": [first, first]}}, headers=admin_headers)

    assert response.status_code == 400
    assert "skip.instances" in details(response) and first in details(response)
    assert len(jobs) == 1


def test_revert_ends_a_paused_evacuation_and_releases_its_host(started, client,
                                                               admin_headers, db, jobs):
    evacuation_id, (first, second) = started
    with db.session() as session:
        rows.update_move(session, evacuation_id, first, status=states.DONE)
        rows.set_status(session, evacuation_id, states.PAUSED)

    response = client.post(f"{URL}/{evacuation_id}/revert", json={}, headers=admin_headers)

    assert response.status_code == 202, response.json
    evacuation = response.json["evacuation"]
    assert evacuation["status"] == "REVERTED"
    assert {i["id"]: i["status"] for i in evacuation["instances"]} == {
        first: "DONE", second: "REVERTED"}
    # The reverted move is counted as reverted: it will never run.
    assert evacuation["progress"] == {"total": 2, "done": 1, "moving": 0, "pending": 0,
                                      "failed": 0, "skipped": 0, "reverted": 1}
    assert host_row(db, SOURCE).evacuation_id is None
    assert len(jobs) == 1
    # Ended: nothing more can be done to it.
    again = client.post(f"{URL}/{evacuation_id}/resume", json={}, headers=admin_headers)
    assert again.status_code == 409


# -- what the tenant sees -------------------------------------------------------------


def test_a_tenant_sees_its_server_move_and_its_host_unless_the_policy_hides_it(
        started, client, make_headers, admin_headers, db, conf):
    _evacuation_id, (server, _other) = started
    with db.session() as session:
        session.execute(sa.update(Instance).where(Instance.id == server).values(
            task_state=states.TASK_MIGRATING))
    url = f"/v2/t1/servers/{server}"

    mine = client.get(url, headers=make_headers("t1", "member", "reader"))
    admin = client.get(url, headers=admin_headers)

    assert mine.status_code == admin.status_code == 200
    shown = mine.json["server"]
    assert (shown["status"], shown["task_state"]) == ("ACTIVE", "migrating")
    assert shown["host"] == admin.json["server"]["host"] == SOURCE
    assert admin.json["server"]["task_state"] == "migrating"
    # An operator who keeps host names to administrators: null, and the opaque id.
    restrict_show_host(conf)
    hidden = client.get(url, headers=make_headers("t1", "member", "reader")).json["server"]
    assert hidden["host"] is None and hidden["host_id"] == shown["host_id"]
    listed = client.get("/v2/t1/servers", headers=make_headers("t1", "reader")).json
    assert {s["host"] for s in listed["servers"]} == {None}
