"""Deletes asked while an evacuation moves the servers: 409 naming the server and the
evacuation, nothing written; once the evacuation is DONE the delete goes through.

The real services on the four-host small cloud. Jobs are posted to
``small_cloud.posted`` and run on TaskFlow's serial engine; the evacuation
runs in a thread of its own with slow live moves (the fake driver's move
time), while the test's thread keeps asking the API to delete what it moves.
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
import taskflow.engines

from fleetflow.common import ids, states
from fleetflow.flows import registry
from fleetflow.persistence.models import Evacuation, Instance, Move, Reservation

EVACUATIONS = "/v2/admin/evacuations"
TENANT = "t1"


@pytest.fixture
def cloud(small_cloud, api_services, conf, db):
    import fleetflow.flows.evacuate  # noqa: F401  (registers the flow)
    from fleetflow.compute.drivers.fake_moves import MoveRules
    from fleetflow.services.evacuations import EvacuationOps
    from fleetflow.services.reservations import ReservationOps

    def record(flow_name, flow_kwargs, store=None, flow_id=None, **_):
        small_cloud.posted.append((flow_name, flow_kwargs, store))
        return flow_id or ids.new_uuid()

    api_services.update(
        reservations=ReservationOps(conf, db, submit=record),
        evacuations=EvacuationOps(conf, db, record, compute=small_cloud.compute))
    # Each live move takes a while: the deletes below land while moves hold servers.
    small_cloud.driver.move_rules = MoveRules(live_seconds=0.5)
    return small_cloud


@pytest.fixture
def client(cloud, app):
    return app.test_client()


@pytest.fixture
def tenant_headers(make_headers):
    return make_headers(TENANT, "member", "reader")


def run(job) -> str:
    flow_name, kwargs, store = job
    engine = taskflow.engines.load(registry.build(flow_name, **kwargs),
                                   store=dict(store or {}), engine="serial")
    try:
        engine.run()
    except Exception:  # noqa: BLE001 - a failed flow raises; its state says so
        pass
    return engine.storage.get_flow_state()


def run_posted(cloud) -> list[str]:
    ran = []
    while cloud.posted:
        ran.append(run(cloud.posted.pop(0)))
    return ran


def hosts_of(db, instance_ids) -> list[str]:
    with db.session() as session:
        return sorted(set(session.scalars(sa.select(Instance.host).where(
            Instance.id.in_(list(instance_ids))))))


def statuses(db, instance_ids) -> dict[str, tuple]:
    with db.session() as session:
        return {i.id: (i.status, i.task_state) for i in session.scalars(
            sa.select(Instance).where(Instance.id.in_(list(instance_ids))))}


def move_statuses(db, evacuation_id) -> dict[str, str]:
    with db.session() as session:
        return {m.instance_id: m.status for m in session.scalars(
            sa.select(Move).where(Move.evacuation_id == evacuation_id))}


def evacuation_status(db, evacuation_id) -> str:
    with db.session() as session:
        return session.get(Evacuation, evacuation_id).status


def start_evacuation(cloud, client, admin_headers, hosts) -> tuple[str, tuple]:
    """POST a live evacuation of ``hosts``, one move at a time; (its id, its job)."""
    response = client.post(EVACUATIONS, json={"evacuation": {
        "hosts": hosts, "mode": "live", "max_parallel": 1}}, headers=admin_headers)
    assert response.status_code == 202, response.json
    return response.json["evacuation"]["id"], cloud.posted.pop()


def race(db, evacuation_id, job, attempt) -> tuple[list, object]:
    """Run the evacuation in a thread while ``attempt()`` is asked again and again.

    The first try is made before the run starts (the evacuation accepted, its
    moves PENDING), the next ones while it moves the servers. Returns every
    refused answer and the first one not refused, checking that the
    evacuation had ended by then.
    """
    refused, outcome = [], []
    answer = attempt()
    runner = threading.Thread(target=lambda: outcome.append(run(job)))
    runner.start()
    try:
        while answer.status_code == 409 and runner.is_alive():
            refused.append(answer)
            time.sleep(0.02)
            answer = attempt()
            if answer.status_code != 409:
                # Accepted only once no move holds a server any more.
                assert set(move_statuses(db, evacuation_id).values()) == {states.DONE}
    finally:
        runner.join(120)
    assert outcome == ["SUCCESS"]
    assert evacuation_status(db, evacuation_id) == states.DONE
    if answer.status_code == 409:  # asked last while the run was ending
        refused.append(answer)
        answer = attempt()
    return refused, answer


def assert_names_a_moved_server(response, evacuation_id, server_ids) -> None:
    error = response.json["errors"][0]
    assert error["status"] == "409" or error["status"] == 409
    assert error["code"] == "SERVER_BEING_MOVED"
    assert evacuation_id in error["detail"]
    assert any(uuid in error["detail"] for uuid in server_ids), error["detail"]


def test_a_reservation_whose_servers_are_moved_is_not_deleted_until_the_moves_end(
        cloud, client, admin_headers, tenant_headers, db):
    assert cloud.provision(3) == "SUCCESS"
    cloud.posted.clear()
    with db.session() as session:
        reservation_id = session.scalars(sa.select(Reservation.id)).one()
        servers = list(session.scalars(sa.select(Instance.id).where(
            Instance.reservation_id == reservation_id)))
    with db.session() as session:
        before = {i.id: (i.host, i.status) for i in session.scalars(
            sa.select(Instance).where(Instance.id.in_(servers)))}
    evacuation_id, job = start_evacuation(cloud, client, admin_headers, hosts_of(db, servers))

    def delete():
        answer = client.delete(f"/v2/{TENANT}/reservations/{reservation_id}",
                               headers=tenant_headers)
        if answer.status_code == 409:
            # Refused: nothing written, nothing posted.
            with db.session() as session:
                assert session.get(Reservation, reservation_id).status == states.ACTIVE
            assert {s for s, _t in statuses(db, servers).values()} == {states.ACTIVE}
            assert cloud.posted == []
        return answer

    refused, accepted = race(db, evacuation_id, job, delete)
    assert refused, "no delete was asked while the evacuation held the servers"
    for answer in refused:
        assert_names_a_moved_server(answer, evacuation_id, servers)
    assert accepted.status_code == 202, accepted.json
    assert move_statuses(db, evacuation_id) == {uuid: states.DONE for uuid in servers}
    # Every server moved, none of them while a delete had it.
    assert all(host not in hosts_of(db, [uuid]) for uuid, (host, _s) in before.items())
    assert run_posted(cloud) == ["SUCCESS"]
    with db.session() as session:
        assert session.get(Reservation, reservation_id).status == states.DELETED
    assert {s for s, _t in statuses(db, servers).values()} == {states.DELETED}
    report = cloud.audit(strict=True)
    assert report.clean, report.summary()


VCLUSTER = {"name": "db", "instances": [
    {"name": "a", "type": "server", "spec": {"imageRef": "cirros", "flavorRef": "1"}},
    {"name": "b", "type": "server", "spec": {"imageRef": "cirros", "flavorRef": "1"}}],
    "groupings": [{"name": "apart", "membersRef": ["a", "b"],
                   "spec": {"rule": "anti-affinity"}}]}


@pytest.mark.parametrize("change", ["remove", "delete"])
def test_a_vcluster_whose_servers_are_moved_is_not_changed_until_the_moves_end(
        cloud, client, admin_headers, tenant_headers, db, change):
    response = client.post(f"/v2/{TENANT}/vclusters", json={"vcluster": VCLUSTER},
                           headers=tenant_headers)
    assert response.status_code == 202, response.json
    vcluster_id = response.json["vcluster"]["id"]
    assert run_posted(cloud) == ["SUCCESS"]
    url = f"/v2/{TENANT}/vclusters/{vcluster_id}"
    view = client.get(url, headers=tenant_headers).json["vcluster"]
    assert view["status"] == states.ACTIVE
    servers = {m["name"]: m["id"] for m in view["instances"]}
    # Only a's host: b stays where it is, and a moves away from it (anti-affinity).
    evacuation_id, job = start_evacuation(cloud, client, admin_headers,
                                          hosts_of(db, [servers["a"]]))

    def ask():
        if change == "remove":
            answer = client.delete(f"{url}/instances/a", headers=tenant_headers)
        else:
            answer = client.delete(url, headers=tenant_headers)
        if answer.status_code == 409:
            assert client.get(url, headers=tenant_headers).json["vcluster"]["status"] \
                == states.ACTIVE
            assert {s for s, _t in statuses(db, servers.values()).values()} == {
                states.ACTIVE}
            assert cloud.posted == []
        return answer

    refused, accepted = race(db, evacuation_id, job, ask)
    assert refused, "no change was asked while the evacuation held the server"
    for answer in refused:
        assert_names_a_moved_server(answer, evacuation_id, [servers["a"]])
    assert accepted.status_code == 202, accepted.json
    assert run_posted(cloud) == ["SUCCESS"]
    view = client.get(url, headers=tenant_headers).json["vcluster"]
    if change == "remove":
        assert view["status"] == states.ACTIVE
        assert [m["name"] for m in view["instances"]] == ["b"]
        assert statuses(db, [servers["a"]])[servers["a"]][0] == states.DELETED
    else:
        assert view["status"] == states.DELETED
        assert {s for s, _t in statuses(db, servers.values()).values()} == {states.DELETED}
    report = cloud.audit(strict=True)
    assert report.clean, report.summary()
