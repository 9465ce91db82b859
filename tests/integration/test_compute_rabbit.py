"""A compute agent in another process, over the real RabbitMQ, killed with -9 and back."""

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

from fleetflow.common import config
from fleetflow.compute import messaging
from fleetflow.compute.exceptions import CapacityExceeded, HostDead, OutcomeUnknown
from fleetflow.compute.rpcapi import ComputeAPI
from fleetflow.persistence.db import Database
from fleetflow.persistence.models import Host

pytestmark = pytest.mark.services

INVENTORY = {"VCPU": {"total": 4, "allocation_ratio": 1.0, "reserved": 0},
             "MEMORY_MB": {"total": 4096, "allocation_ratio": 1.0, "reserved": 0}}
SMALL = {"VCPU": 1, "MEMORY_MB": 256}
FLEETFLOW = str(Path(sys.executable).with_name("fleetflow"))


@pytest.fixture
def cloud(tmp_path, rabbit_url):
    """A database with two hosts and a config file the agent process reads."""
    topic = f"compute-it-{uuid.uuid4().hex[:8]}"
    db_url = f"sqlite:///{tmp_path / 'fleetflow.db'}"
    conf_file = tmp_path / "fleetflow.conf"
    conf_file.write_text(
        f"[DEFAULT]\nstate_dir = {tmp_path}\n[database]\nconnection = {db_url}\n"
        f"[messaging]\ntransport_url = {rabbit_url}\ntopic = {topic}\nrpc_timeout = 10\n")
    database = Database(db_url)
    database.upgrade()
    with database.session() as session:
        for name in ("rh1", "rh2"):
            session.add(Host(uuid=str(uuid.uuid4()), name=name, region="r1", zone="z1",
                             rack="k1", inventory=INVENTORY))
    conf = config.load(args=["--config-file", str(conf_file)], environ={})
    yield conf, conf_file, database
    messaging.forget_transport(conf)
    database.dispose()
    delete_queues(rabbit_url, [topic] + [f"{topic}.{s}" for s in ("rh1", "rh2", "it-fleet")])


def delete_queues(rabbit_url, names):
    """oslo.messaging's server queues outlive their consumers: drop this test's."""
    import kombu

    with kombu.Connection(rabbit_url.replace("rabbit://", "amqp://", 1)) as conn:
        channel = conn.channel()
        for name in names:
            channel.queue_delete(name)


def start_agent(conf_file, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFLOW_")}
    return subprocess.Popen([FLEETFLOW, "--config-file", str(conf_file), "compute-agent",
                             *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def routes(database):
    with database.session() as session:
        return dict(session.execute(sa.select(Host.name, Host.compute_agent)).all())


def wait_until_serving(api, host, process, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        # The agent writes its routes before it listens: re-read them.
        api.routes.refresh()
        try:
            return api.ping(host, timeout=1)
        except OutcomeUnknown:
            continue
    raise AssertionError(f"agent did not serve {host} within {seconds}s")


def test_agent_process_survives_kill_9_with_its_guests(cloud):
    conf, conf_file, database = cloud
    # One process serving every host (fleet mode) ...
    agent = start_agent(conf_file, "--all", "--server-name", "it-fleet")
    try:
        api = ComputeAPI(conf, database)
        assert wait_until_serving(api, "rh1", agent)["agent"] == "it-fleet"
        assert routes(database) == {"rh1": "it-fleet", "rh2": "it-fleet"}

        # Call, and errors crossing processes as their own classes.
        assert api.build_instance("rh1", "vm-1", SMALL, image="cirros")["state"] == "ACTIVE"
        with pytest.raises(CapacityExceeded):
            api.build_instance("rh1", "vm-huge", {"VCPU": 64})
        api.set_faults("rh2", dead=True)
        with pytest.raises(HostDead):
            api.ping("rh2")
        assert api.ping("rh1")["alive"] is True
        api.set_faults("rh2", dead=False)
        # Cast: fire and forget, then see it land.
        api.build_instance("rh2", "vm-2", SMALL, cast=True)
        deadline = time.monotonic() + 30
        while api.get_instance("rh2", "vm-2") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert api.get_instance("rh2", "vm-2")["state"] == "ACTIVE"

        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        with pytest.raises(OutcomeUnknown):
            api.list_instances("rh1", timeout=1)

        # ... comes back as one RPC server per host: routes follow, guests survived.
        agent = start_agent(conf_file, "--hosts", "rh1,rh2")
        wait_until_serving(api, "rh2", agent)
        assert routes(database) == {"rh1": None, "rh2": None}
        assert [g["uuid"] for g in api.list_instances("rh1")] == ["vm-1"]
        assert [g["uuid"] for g in api.list_instances("rh2")] == ["vm-2"]
        # Asking again for what already runs does not boot it twice.
        assert api.ensure_built("rh1", "vm-1", SMALL)["spawn_count"] == 1

        agent.send_signal(signal.SIGTERM)
        assert agent.wait(30) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


POOL_WARNINGS = ("Connection pool limit exceeded", "Number of call queues")


def test_many_calls_at_once_log_no_pool_warning(cloud, caplog):
    """As many calls at once as a 200-instance flow's boots: oslo.messaging's pools
    are sized for them, on the calling side and on the agent replying."""
    conf, conf_file, database = cloud
    agent = start_agent(conf_file, "--all", "--server-name", "it-fleet")
    try:
        api = ComputeAPI(conf, database)
        wait_until_serving(api, "rh1", agent)
        with caplog.at_level(logging.WARNING, logger="oslo.messaging"), \
                ThreadPoolExecutor(max_workers=200) as pool:
            answers = list(pool.map(lambda i: api.ping(f"rh{1 + i % 2}"), range(200)))
        assert all(answer["alive"] for answer in answers)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(30) == 0
        agent_log = agent.stderr.read()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    logged = [r.getMessage() for r in caplog.records]
    assert not [m for m in logged if m.startswith(POOL_WARNINGS)], logged
    assert not [line for line in agent_log.splitlines()
                if any(w in line for w in POOL_WARNINGS)], agent_log
