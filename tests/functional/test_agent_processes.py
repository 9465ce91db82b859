"""The simulated fleet of ``fleetflow serve`` in child processes (``[compute] agent_processes``).

Real processes throughout: each agent is ``fleetflow compute-agent --shard k/n``
started by :class:`AgentProcesses`, reached over the Unix-socket transport.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from fleetflow.common import config
from fleetflow.compute import agent_processes, agent_setup, messaging
from fleetflow.compute.rpcapi import ComputeAPI
from fleetflow.persistence.models import Host

HOSTS = [f"h{i:02d}" for i in range(12)]
EXIT_GUARD_S = 60


@pytest.fixture
def fleet_db(add_hosts):
    return add_hosts(HOSTS)


@pytest.fixture
def agent_conf(make_conf):
    conf = make_conf(messaging={"topic": f"compute-{uuid.uuid4().hex[:8]}",
                                "rpc_timeout": 30},
                     compute={"boot_seconds": 0.2, "max_concurrent_builds": 3})
    yield conf
    messaging.forget_transport(conf)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie no one has reaped yet has stopped too.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_shards_serve_every_host_exactly_once(count):
    names = [f"z{z}-r{r}-h{h:02d}" for z in range(2) for r in range(5) for h in range(40)]
    owners = {name: [k for k in range(count) if agent_setup.in_shard(name, (k, count))]
              for name in names}
    assert all(len(found) == 1 for found in owners.values())
    sizes = [sum(found == [k] for found in owners.values()) for k in range(count)]
    assert min(sizes) > len(names) / count / 2  # no shard is left (nearly) empty


def test_a_child_loads_the_same_configuration_from_the_environment(make_conf):
    conf = make_conf(compute={"boot_seconds": 1.5, "max_concurrent_builds": 7,
                              "agent_threads": 9},
                     messaging={"topic": "elsewhere"}, api={"port": 0})
    loaded = config.load(args=[], environ=config.environment_of(conf))
    for group, opts in config.OPTS.items():
        for opt in opts:
            mine = conf[group][opt.dest] if group else conf[opt.dest]
            theirs = loaded[group][opt.dest] if group else loaded[opt.dest]
            assert theirs == mine, (group, opt.dest)


def test_fake_becomes_the_socket_transport_and_a_broker_url_stays(make_conf, tmp_path):
    url = agent_processes.transport_url(make_conf())
    assert url == f"fleetflow-ipc://{tmp_path / 'rpc'}"
    rabbit = "rabbit://guest:guest@127.0.0.1:5672/"
    assert agent_processes.transport_url(make_conf(messaging={"transport_url": rabbit})) == rabbit


def test_agents_serve_the_whole_fleet_between_them_and_stop(agent_conf, fleet_db):
    url = agent_processes.transport_url(agent_conf)
    agent_conf.set_override("transport_url", url, group="messaging")
    agents = agent_processes.AgentProcesses(agent_conf, 2, url).start()
    pids = [p.pid for p in agents.procs]
    try:
        assert agents.alive()
        with fleet_db.session() as session:
            routes = dict(session.execute(sa.select(Host.name, Host.compute_agent)).all())
        assert set(routes.values()) == {agent_processes.server_name(k, 2) for k in range(2)}
        api = ComputeAPI(agent_conf, fleet_db)
        assert {api.ping(h)["agent"] for h in HOSTS} == set(routes.values())
        assert all(api.ping(h)["agent"] == routes[h] for h in HOSTS)
        guest = api.build_instance(HOSTS[3], "vm-1", {"VCPU": 1, "MEMORY_MB": 256})
        assert guest["state"] == "ACTIVE" and guest["host"] == HOSTS[3]
        assert [g["uuid"] for g in api.list_instances(HOSTS[3])] == ["vm-1"]
    finally:
        agents.stop()
    assert not agents.alive()
    assert all(_gone(pid) for pid in pids)


def test_an_agent_that_cannot_serve_fails_the_start(agent_conf, tmp_path):
    # No schema, no hosts: the child exits with its error instead of serving.
    agent_conf.set_override("connection", f"sqlite:///{tmp_path / 'empty.db'}",
                            group="database")
    url = agent_processes.transport_url(agent_conf)
    agents = agent_processes.AgentProcesses(agent_conf, 2, url)
    with pytest.raises(RuntimeError, match="exited"):
        agents.start(timeout=EXIT_GUARD_S)
    assert agents.procs == []


def test_an_agent_that_says_something_else_fails_the_start_without_hanging(agent_conf,
                                                                          monkeypatch):
    """A child alive but not saying 'serving' is stopped, not waited for."""
    url = agent_processes.transport_url(agent_conf)
    agents = agent_processes.AgentProcesses(agent_conf, 1, url)
    monkeypatch.setattr(agents, "_command", lambda index: [
        sys.executable, "-c", "import sys; print('hello', flush=True); sys.stdin.read()"])
    failures: list = []

    def start():
        try:
            agents.start(timeout=EXIT_GUARD_S)
        except RuntimeError as exc:
            failures.append(str(exc))

    starter = threading.Thread(target=start, daemon=True)
    starter.start()
    starter.join(EXIT_GUARD_S)
    assert not starter.is_alive(), "start() hung on an agent that never serves"
    assert len(failures) == 1 and "said 'hello'" in failures[0]
    assert agents.procs == []


def test_agents_exit_when_serve_is_killed(agent_conf, fleet_db, tmp_path):
    """kill -9 of the parent closes the agents' stdin: they stop on their own."""
    env = dict(os.environ, **config.environment_of(agent_conf))
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from fleetflow.common import config
        from fleetflow.compute import agent_processes
        conf = config.load(args=[])
        url = agent_processes.transport_url(conf)
        agents = agent_processes.AgentProcesses(conf, 2, url).start()
        print(" ".join(str(p.pid) for p in agents.procs), flush=True)
        time.sleep(600)
        """)], env=env, stdout=subprocess.PIPE, text=True)
    children: list[int] = []
    try:
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(children) == 2 and not any(_gone(pid) for pid in children)
        parent.send_signal(signal.SIGKILL)
        parent.wait(EXIT_GUARD_S)
        deadline = time.monotonic() + EXIT_GUARD_S
        while not all(_gone(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in children)
    finally:
        parent.kill()
        for pid in children:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
