"""Compute RPC in-process: the embedded fleet agent and the client tasks use."""

import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from fleetflow.common.exceptions import StaleFence
from fleetflow.compute import agent as compute_agent
from fleetflow.compute import agent_setup, messaging
from fleetflow.compute.exceptions import (
    BuildFailed,
    CapacityExceeded,
    InstanceNotFound,
    OutcomeUnknown,
)
from fleetflow.compute.rpcapi import ComputeAPI
from fleetflow.persistence.models import Host

INVENTORY = {"VCPU": {"total": 4, "allocation_ratio": 1.0, "reserved": 0},
             "MEMORY_MB": {"total": 4096, "allocation_ratio": 1.0, "reserved": 0}}
SMALL = {"VCPU": 1, "MEMORY_MB": 256}


def add_hosts(db, names):
    with db.session() as session:
        for name in names:
            session.add(Host(uuid=str(uuid.uuid4()), name=name, region="r1", zone="z1",
                             rack="k1", inventory=INVENTORY))


@pytest.fixture(scope="module")
def rpc_conf(tmp_path_factory):
    # Module-scoped (one agent for the file: stopping one takes ~1 s), with
    # a topic of its own: the in-memory broker is shared by the whole process.
    from fleetflow.common import config

    state_dir = tmp_path_factory.mktemp("compute-rpc")
    conf = config.load(args=[], environ={})
    conf.set_override("state_dir", str(state_dir))
    conf.set_override("connection", f"sqlite:///{state_dir / 'fleetflow.db'}",
                      group="database")
    conf.set_override("topic", f"compute-{uuid.uuid4().hex[:8]}", group="messaging")
    conf.set_override("rpc_timeout", 10, group="messaging")
    yield conf
    messaging.forget_transport(conf)


@pytest.fixture(scope="module")
def rpc_db(rpc_conf):
    from fleetflow.persistence.db import Database

    database = Database.from_conf(rpc_conf)
    database.upgrade()
    add_hosts(database, ["h1", "h2", "h3", "h4", "h5", "p1", "p2", "p3"])
    yield database
    database.dispose()


@pytest.fixture(scope="module")
def fleet(rpc_conf, rpc_db):
    agent = compute_agent.serve_fleet(rpc_conf, rpc_db,
                                      hosts=["h1", "h2", "h3", "h4", "h5"])
    yield agent
    agent.stop()


@pytest.fixture(scope="module")
def api(rpc_conf, rpc_db, fleet):
    return ComputeAPI(rpc_conf, rpc_db)


def test_fleet_agent_routes_every_host_to_one_server(rpc_db, fleet, api):
    with rpc_db.session() as session:
        routes = dict(session.execute(sa.select(Host.name, Host.compute_agent)).all())
    assert {h: routes[h] for h in fleet.driver.hosts} == {
        h: fleet.agent_name for h in ("h1", "h2", "h3", "h4", "h5")}
    assert routes["p1"] is None
    assert len(fleet.servers) == 1
    assert api.ping("h2")["host"] == "h2"


def test_routes_already_written_are_not_written_again(rpc_db, fleet):
    statements = []
    here = threading.get_ident()  # not the agent's heartbeats

    def seen(conn, cursor, statement, *args):
        if threading.get_ident() == here:
            statements.append(" ".join(statement.split()[:2]).upper())

    sa.event.listen(rpc_db.engine, "before_cursor_execute", seen)
    try:
        agent_setup.write_routes(rpc_db, ["h1", "h2", "h3"], fleet.agent_name)
        assert statements == ["BEGIN", "SELECT HOSTS.NAME"]  # one look: no lock, no write
        statements.clear()
        agent_setup.write_routes(rpc_db, ["h1", "p1"], "elsewhere")
        assert "BEGIN IMMEDIATE" in statements and "UPDATE HOSTS" in statements
        with rpc_db.session() as session:
            routes = dict(session.execute(sa.select(Host.name, Host.compute_agent)).all())
        assert (routes["h1"], routes["p1"], routes["h2"]) == (
            "elsewhere", "elsewhere", fleet.agent_name)
    finally:
        sa.event.remove(rpc_db.engine, "before_cursor_execute", seen)
        agent_setup.write_routes(rpc_db, ["h1"], fleet.agent_name)
        agent_setup.write_routes(rpc_db, ["p1"], None)


def test_call_builds_once_and_lists(fleet, api):
    first = api.build_instance("h1", "i-1", SMALL, image="cirros")
    again = api.build_instance("h1", "i-1", SMALL, image="cirros")
    assert first["state"] == again["state"] == "ACTIVE"
    assert again["spawn_count"] == 1
    assert [g["uuid"] for g in api.list_instances("h1")] == ["i-1"]
    assert api.list_instances("h2") == []
    api.attach_volume("h1", "i-1", "vol-1")
    assert api.get_instance("h1", "i-1")["volumes"] == ["vol-1"]
    assert api.destroy_instance("h1", "i-1")["destroyed"] is True
    assert api.get_instance("h1", "i-1") is None
    assert fleet.driver.spawn_count("i-1") == 1


def test_cast_is_delivered(fleet, api):
    assert api.build_instance("h3", "cast-1", SMALL, cast=True) is None
    deadline = time.monotonic() + 10
    while api.get_instance("h3", "cast-1") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert api.get_instance("h3", "cast-1")["state"] == "ACTIVE"


def test_driver_errors_arrive_as_their_own_classes(fleet, api):
    for i in range(4):
        api.build_instance("h2", f"fill-{i}", SMALL)
    with pytest.raises(CapacityExceeded) as err:
        api.build_instance("h2", "too-many", SMALL)
    assert err.value.details["resource_class"] == "VCPU"

    api.build_instance("h1", "fenced", SMALL, fence={"key": "job-9", "token": 3})
    with pytest.raises(StaleFence) as stale:
        api.destroy_instance("h1", "fenced", fence={"key": "job-9", "token": 2})
    assert stale.value.details["current"] == 3

    api.set_faults("h1", fail_next=1)
    with pytest.raises(BuildFailed):
        api.build_instance("h1", "unlucky", SMALL)
    assert api.build_instance("h1", "unlucky", SMALL)["spawn_count"] == 1

    with pytest.raises(InstanceNotFound):
        api.attach_volume("h3", "nobody", "vol-1")


def test_dead_host_times_out_as_outcome_unknown(fleet, api):
    api.set_faults("h4", dead=True, hang_seconds=30)
    with pytest.raises(OutcomeUnknown):
        api.build_instance("h4", "ghost", SMALL, timeout=0.5)
    # The other hosts of the same agent still answer.
    assert api.ping("h2")["alive"] is True
    # The host comes back and runs the request it was holding after all: a
    # timeout means "unknown", not "failed". Asking first keeps it one spawn.
    api.set_faults("h4", dead=False)
    guest = api.ensure_built("h4", "ghost", SMALL)
    assert guest["state"] == "ACTIVE"
    assert fleet.driver.spawn_count("ghost") == 1


def test_unknown_host_times_out_as_outcome_unknown(fleet, api):
    with pytest.raises(OutcomeUnknown):
        api.ping("no-such-host", timeout=0.5)


def test_ensure_built_asks_before_retrying(fleet, api):
    api.set_faults("h5", dead=True, hang_seconds=30)
    # Revive the host while ensure_built is retrying through timeouts.
    reviver = threading.Timer(1.0, lambda: fleet.driver.set_faults("h5", dead=False))
    reviver.start()
    try:
        guest = api.ensure_built("h5", "patient", SMALL, timeout=0.4, attempts=20)
    finally:
        reviver.cancel()
    assert guest["state"] == "ACTIVE" and guest["spawn_count"] == 1
    assert fleet.driver.spawn_count("patient") == 1


def test_per_host_agent_listens_on_the_host_name(rpc_conf, rpc_db):
    agent = compute_agent.serve(rpc_conf, rpc_db, hosts=["p1", "p2"], per_host=True)
    try:
        with rpc_db.session() as session:
            routes = dict(session.execute(sa.select(Host.name, Host.compute_agent)).all())
        assert routes["p1"] is None and routes["p2"] is None
        assert len(agent.servers) == 2
        api = ComputeAPI(rpc_conf, rpc_db)
        assert api.build_instance("p2", "own", SMALL)["host"] == "p2"
        # h3 is not served by this agent: nobody answers.
        with pytest.raises(OutcomeUnknown):
            api.ping("p3", timeout=0.5)
    finally:
        agent.stop()
