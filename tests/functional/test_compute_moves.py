"""Moves, clean-up of evacuated copies and heartbeats through the compute agent.

Real pieces: an upgraded SQLite database, the agent served over the
in-process transport, the RPC client tasks use.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.compute import agent as compute_agent
from fleetflow.compute import agent_setup, messaging
from fleetflow.compute.drivers.fake import FakeDriver
from fleetflow.compute.exceptions import (
    HostDead,
    InstanceNotFound,
    LiveMigrationUnsupported,
    MoveFailed,
    SourceAlive,
)
from fleetflow.compute.rpcapi import ComputeAPI
from fleetflow.persistence import evacuations
from fleetflow.persistence.models import Evacuation, Host, Instance, Move

SMALL = {"VCPU": 1, "MEMORY_MB": 256}
HOSTS = ["h1", "h2", "h3"]


@pytest.fixture
def agent_conf(make_conf):
    conf = make_conf(messaging={"topic": f"compute-{uuid.uuid4().hex[:8]}",
                                "rpc_timeout": 10},
                     compute={"heartbeat_interval": 0.1, "migrate_seconds": 0.2})
    yield conf
    messaging.forget_transport(conf)


@pytest.fixture
def hosts_db(add_hosts):
    return add_hosts(HOSTS)


@pytest.fixture
def serve(agent_conf, hosts_db):
    """``serve()``: the agent of every host, stopped at the end of the test."""
    agents = []

    def _serve():
        agent = compute_agent.serve(agent_conf, hosts_db, hosts=HOSTS)
        agents.append(agent)
        return agent

    yield _serve
    for agent in agents:
        agent.stop()


@pytest.fixture
def hosts_file(agent_conf, hosts_db):
    """The hosts' state file as another process sees it (before the agent starts)."""
    inventories = agent_setup.load_inventories(hosts_db, HOSTS)
    driver = FakeDriver.from_conf(agent_conf)
    driver.add_hosts(inventories)
    yield driver
    driver.close()


def rebuilt_elsewhere(db, instance: str, source: str, now_on: str,
                      status: str = states.DONE) -> None:
    """The rows of a rebuild-evacuation of ``instance`` off ``source`` onto ``now_on``."""
    evacuation_id = evacuations.new_evacuation_id()
    with db.session() as session:
        session.add(Instance(id=instance, tenant_id="t1", name=instance, host=now_on,
                             status=states.ACTIVE, flavor_id="f1", image_id="i1"))
        session.add(Evacuation(id=evacuation_id, hosts=[source], mode=states.MODE_REBUILD,
                               status=states.DONE))
        session.flush()
        session.add(Move(evacuation_id=evacuation_id, instance_id=instance, index=0,
                         tenant_id="t1", source=source, destination=now_on,
                         mode=states.MODE_REBUILD, status=status,
                         migration_id=evacuations.migration_id_for(evacuation_id, instance)))


def heartbeats(db) -> dict:
    with db.session() as session:
        return dict(session.execute(sa.select(Host.name, Host.heartbeat_at)).all())


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"still false after {timeout} s")


def test_moves_over_rpc(serve, agent_conf, hosts_db):
    agent = serve()
    api = ComputeAPI(agent_conf, hosts_db)
    assert api.ping("h1")["simulated"] is True
    guest = api.build_instance("h1", "vm-1", SMALL, image="cirros")

    started = api.start_move("h2", "m1", "cold", "vm-1", "h1", SMALL)
    assert started["status"] == "running" and started["destination"] == "h2"
    assert api.start_move("h2", "m1", "cold", "vm-1", "h1", SMALL) == started
    done = wait_for(lambda: (api.get_move("h2", "m1") or {}).get("status") == "completed")
    assert done
    assert api.get_instance("h2", "vm-1")["data_token"] == guest["data_token"]
    assert api.get_instance("h1", "vm-1")["state"] == "SHUTOFF"
    assert api.confirm_move("h2", "m1")["status"] == "confirmed"
    assert api.get_instance("h1", "vm-1") is None
    assert api.get_move("h2", "never") is None
    assert agent.driver.move_count("vm-1") == 1

    # The hosts' errors arrive as their own classes.
    with pytest.raises(SourceAlive):
        api.start_move("h3", "m2", "rebuild", "vm-1", "h2", SMALL, image="cirros")
    with pytest.raises(InstanceNotFound):
        api.start_move("h3", "m2", "live", "nobody", "h2", SMALL)
    assert api.set_server_faults("h2", "vm-1", live_migratable=False) == {
        "uuid": "vm-1", "fail_move": False, "live_migratable": False}
    with pytest.raises(LiveMigrationUnsupported):
        api.start_move("h3", "m2", "live", "vm-1", "h2", SMALL)
    with pytest.raises(MoveFailed):
        api.revert_move("h2", "m1")  # confirmed

    assert api.set_faults("h3", fail_next_moves=1)["fail_next_moves"] == 1
    api.start_move("h3", "m3", "cold", "vm-1", "h2", SMALL)
    failed = wait_for(lambda: api.get_move("h3", "m3")["status"] == "failed" and
                      api.get_move("h3", "m3"))
    assert failed["code"] == "MIGRATION_FAILED"
    assert api.revert_move("h3", "m3")["status"] == "reverted"
    assert api.revert_move("h3", "never") is None
    assert api.get_instance("h2", "vm-1")["state"] == "ACTIVE"

    api.set_faults("h2", dead=True)
    with pytest.raises(HostDead):
        api.start_move("h3", "m4", "cold", "vm-1", "h2", SMALL)
    rebuild = api.start_move("h3", "m4", "rebuild", "vm-1", "h2", SMALL, image="ubuntu")
    assert rebuild["kind"] == "rebuild"
    wait_for(lambda: api.get_move("h3", "m4")["status"] == "completed")
    assert api.get_instance("h3", "vm-1")["image"] == "ubuntu"


def test_a_host_coming_back_destroys_what_the_database_says_was_rebuilt(
        serve, agent_conf, hosts_db, hosts_file):
    for name in ("gone", "failed-rebuild", "kept"):
        hosts_file.build_instance("h1", name, SMALL)
    hosts_file.build_instance("h2", "gone", SMALL)  # the copy that lives on
    hosts_file.build_instance("h3", "gone-too", SMALL)
    hosts_file.set_faults("h3", dead=True)
    rebuilt_elsewhere(hosts_db, "gone", "h1", "h2")
    rebuilt_elsewhere(hosts_db, "failed-rebuild", "h1", "h2", status=states.FAILED)
    rebuilt_elsewhere(hosts_db, "gone-too", "h3", "h2")
    hosts_file.close()

    agent = serve()
    # At start: the living host's rebuilt copies are gone, nothing else.
    assert [g["uuid"] for g in agent.driver.list_instances("h1")] == [
        "failed-rebuild", "kept"]
    assert [g["uuid"] for g in agent.driver.list_instances("h2")] == ["gone"]
    # The dead one keeps its copy until it comes back, then destroys it.
    api = ComputeAPI(agent_conf, hosts_db)
    with pytest.raises(HostDead):
        api.list_instances("h3")
    assert api.set_faults("h3", dead=False)["destroyed_copies"] == ["gone-too"]
    assert api.list_instances("h3") == []


def test_without_a_database_coming_back_destroys_nothing(hosts_file):
    endpoint = compute_agent.ComputeEndpoint(hosts_file, "agent-x")
    hosts_file.build_instance("h1", "stays", SMALL)
    endpoint.set_faults({}, host="h1", dead=True)
    answer = endpoint.set_faults({}, host="h1", dead=False)
    assert "destroyed_copies" not in answer and answer["dead"] is False
    assert [g["uuid"] for g in hosts_file.list_instances("h1")] == ["stays"]


def test_the_agent_beats_for_its_living_hosts(serve, hosts_db, hosts_file):
    hosts_file.set_faults("h3", dead=True)
    agent = serve()
    beats = wait_for(lambda: (b := heartbeats(hosts_db))["h1"] and b["h2"] and b)
    assert beats["h3"] is None
    first = beats["h1"]
    wait_for(lambda: heartbeats(hosts_db)["h1"] > first)  # every interval
    agent.driver.set_faults("h3", dead=False)
    wait_for(lambda: heartbeats(hosts_db)["h3"])
    agent.driver.set_faults("h1", dead=True)
    stopped_at = wait_for(lambda: (b := heartbeats(hosts_db))["h2"] > b["h1"] and b["h1"])
    time.sleep(0.3)
    assert heartbeats(hosts_db)["h1"] == stopped_at
    agent.stop()
    assert not agent._heart.is_alive()
    after = heartbeats(hosts_db)
    time.sleep(0.3)
    assert heartbeats(hosts_db) == after


def test_a_heartbeat_the_database_refuses_is_logged_not_fatal(serve, hosts_db, monkeypatch,
                                                              caplog):
    def refuse(session, hosts):
        raise sa.exc.OperationalError("UPDATE hosts", {}, Exception("database is locked"))

    monkeypatch.setattr(evacuations, "heartbeat", refuse)
    with caplog.at_level(logging.ERROR, logger=compute_agent.__name__):
        agent = serve()
        wait_for(lambda: len([r for r in caplog.records if "heartbeat failed" in r.message])
                 >= 2)
    assert agent._heart.is_alive()
    monkeypatch.undo()
    wait_for(lambda: heartbeats(hosts_db)["h1"])
    assert agent.heartbeat() == HOSTS
