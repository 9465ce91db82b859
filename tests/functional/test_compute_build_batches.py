"""Builds in batches over real RPC: a fleet agent, the client tasks use, many callers."""

from __future__ import annotations

import threading
from concurrent import futures

import oslo_messaging
import pytest

from fleetflow.common.exceptions import StaleFence
from fleetflow.compute import agent as compute_agent
from fleetflow.compute import agent_setup, build_batches, messaging
from fleetflow.compute.exceptions import BuildFailed, CapacityExceeded
from fleetflow.compute.rpcapi import ComputeAPI

SMALL = {"VCPU": 1, "MEMORY_MB": 256}
HOSTS = ["b1", "b2", "b3", "b4"]
WAIT_S = 60


@pytest.fixture
def hosts_db(add_hosts):
    return add_hosts(HOSTS)


class Gate:
    """Wraps the agent's runner: records each batch's size, holds the first ``hold``
    batches until opened (so the callers behind them queue up)."""

    def __init__(self, runner, hold: int):
        self.runner = runner
        self.sizes: list[int] = []
        self.hold = hold
        self.opened = threading.Event()
        self.held = threading.Semaphore(0)

    def run(self, builds, answer_within):
        self.sizes.append(len(builds))
        if len(self.sizes) <= self.hold:
            self.held.release()
            assert self.opened.wait(WAIT_S)
        return self.runner.run(builds, answer_within)


def build_in_threads(api, uuids) -> list[dict]:
    with futures.ThreadPoolExecutor(max_workers=len(uuids)) as callers:
        calls = [callers.submit(api.ensure_built, HOSTS[i % len(HOSTS)], u, SMALL)
                 for i, u in enumerate(uuids)]
        return [call.result(timeout=WAIT_S) for call in calls]


def test_many_callers_share_calls_and_each_build_spawns_once(compute_conf, hosts_db,
                                                            served_agent):
    conf = compute_conf()
    with served_agent(conf, hosts_db) as agent:
        gate = agent.endpoint.builds = Gate(agent.endpoint.builds, build_batches.IN_FLIGHT)
        api = ComputeAPI(conf, hosts_db)
        uuids = [f"vm-{i}" for i in range(40)]
        with futures.ThreadPoolExecutor(max_workers=1) as runner:
            done = runner.submit(build_in_threads, api, uuids)
            for _ in range(build_batches.IN_FLIGHT):
                assert gate.held.acquire(timeout=WAIT_S)
            gate.opened.set()
            guests = done.result(WAIT_S)
        assert [g["uuid"] for g in guests] == uuids
        assert {g["state"] for g in guests} == {"ACTIVE"}
        assert sum(gate.sizes) == 40
        assert max(gate.sizes) > 1 and len(gate.sizes) < 40
        assert {agent.driver.spawn_count(u) for u in uuids} == {1}


def test_a_batch_answers_each_build_with_its_own_error(compute_conf, hosts_db, served_agent):
    conf = compute_conf()
    with served_agent(conf, hosts_db):
        api = ComputeAPI(conf, hosts_db)
        api.ensure_built("b1", "fenced", SMALL, fence={"key": "job-1", "token": 3})
        api.set_faults("b2", fail_next=1)
        calls = {
            "stale": lambda: api.ensure_built("b1", "stale", SMALL,
                                              fence={"key": "job-1", "token": 2}),
            "huge": lambda: api.ensure_built("b3", "huge", {"VCPU": 999}),
            "unlucky": lambda: api.ensure_built("b2", "unlucky", SMALL),
            "fine": lambda: api.ensure_built("b4", "fine", SMALL),
        }
        with futures.ThreadPoolExecutor(max_workers=len(calls)) as callers:
            results = {name: callers.submit(call) for name, call in calls.items()}
            with pytest.raises(StaleFence) as stale:
                results["stale"].result(WAIT_S)
            with pytest.raises(CapacityExceeded) as huge:
                results["huge"].result(WAIT_S)
            with pytest.raises(BuildFailed):
                results["unlucky"].result(WAIT_S)
            assert results["fine"].result(WAIT_S)["state"] == "ACTIVE"
        assert stale.value.details["current"] == 3
        assert huge.value.details["resource_class"] == "VCPU"
        assert api.ensure_built("b2", "unlucky", SMALL)["spawn_count"] == 1


class OldEndpoint(compute_agent.ComputeEndpoint):
    """An agent from before batched builds: API 1.0."""

    target = oslo_messaging.Target(version=messaging.RPC_API_VERSION)


def test_an_agent_older_than_batches_gets_one_build_a_call(compute_conf, hosts_db):
    conf = compute_conf()
    agent = compute_agent.ComputeAgent(conf, _driver(conf, hosts_db), ["old-agent"],
                                       agent_name="old-agent", database=hosts_db)
    agent.endpoint = OldEndpoint(agent.driver, "old-agent", hosts_db)
    agent_setup.write_routes(hosts_db, HOSTS, "old-agent")
    agent.start()
    try:
        api = ComputeAPI(conf, hosts_db)
        guests = build_in_threads(api, [f"old-{i}" for i in range(8)])
        assert {g["state"] for g in guests} == {"ACTIVE"}
        assert api._unbatched == {"old-agent"}
    finally:
        agent.stop()


def test_batches_off_sends_one_build_a_call(compute_conf, hosts_db, served_agent):
    conf = compute_conf(batch_builds=False)
    with served_agent(conf, hosts_db) as agent:
        gate = agent.endpoint.builds = Gate(agent.endpoint.builds, 0)
        guests = build_in_threads(ComputeAPI(conf, hosts_db), [f"one-{i}" for i in range(8)])
        assert {g["state"] for g in guests} == {"ACTIVE"}
        assert gate.sizes == []


def _driver(conf, database):
    from fleetflow.compute.drivers.fake import FakeDriver

    driver = FakeDriver.from_conf(conf)
    driver.add_hosts(agent_setup.load_inventories(database, HOSTS))
    return driver
