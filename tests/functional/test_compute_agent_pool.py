"""The compute agent's RPC worker pool: one thread per build slot, started with the server."""

from __future__ import annotations

import threading
from concurrent import futures

import pytest

from fleetflow.compute import agent as compute_agent
from fleetflow.compute.rpcapi import ComputeAPI

SMALL = {"VCPU": 1, "MEMORY_MB": 256}
HOSTS = ["a1", "a2", "a3"]
HANG_GUARD_S = 60


@pytest.fixture
def pool_conf(compute_conf):
    def _make(**compute):
        return compute_conf(**dict({"boot_seconds": 0.3, "max_concurrent_builds": 4},
                                 **compute))
    return _make


@pytest.fixture
def hosts_db(add_hosts):
    return add_hosts(HOSTS)


def test_pool_size_follows_the_build_slots(make_conf):
    conf = make_conf(compute={"max_concurrent_builds": 10})
    assert compute_agent.rpc_pool_size(conf, hosts=3) == 3 * 10 + 64
    assert compute_agent.rpc_pool_size(conf, hosts=100) == 100 * 10 + 64
    assert compute_agent.rpc_pool_size(conf, hosts=500) == 2048  # max_agent_threads
    conf = make_conf(compute={"max_concurrent_builds": 10, "max_agent_threads": 500})
    assert compute_agent.rpc_pool_size(conf, hosts=100) == 500
    conf = make_conf(compute={"agent_threads": 7, "max_concurrent_builds": 10})
    assert compute_agent.rpc_pool_size(conf, hosts=100) == 7  # the operator's choice


def build_all_at_once(conf, db, count: int) -> list[dict]:
    """``count`` builds spread over the hosts, each from a caller thread of its own."""
    api = ComputeAPI(conf, db)
    with futures.ThreadPoolExecutor(max_workers=count) as callers:
        calls = [callers.submit(api.build_instance, HOSTS[i % len(HOSTS)], f"vm-{i}", SMALL)
                 for i in range(count)]
        return [call.result(timeout=HANG_GUARD_S) for call in calls]


def test_every_build_slot_of_every_host_boots_at_once(pool_conf, hosts_db, served_agent):
    conf = pool_conf()
    with served_agent(conf, hosts_db) as agent:
        assert agent.servers[0]._work_executor._max_workers == len(HOSTS) * 4 + 64
        guests = build_all_at_once(conf, hosts_db, len(HOSTS) * 4)
        assert {g["state"] for g in guests} == {"ACTIVE"}
        assert [agent.driver.peak_concurrent_builds(h) for h in HOSTS] == [4, 4, 4]


def test_batched_builds_boot_every_slot_at_once_and_no_more(pool_conf, hosts_db, served_agent):
    conf = pool_conf()
    with served_agent(conf, hosts_db) as agent:
        api = ComputeAPI(conf, hosts_db)
        count = len(HOSTS) * 4 + 3  # three builds wait for a slot
        with futures.ThreadPoolExecutor(max_workers=count) as callers:
            calls = [callers.submit(api.ensure_built, HOSTS[i % len(HOSTS)], f"vm-{i}", SMALL)
                     for i in range(count)]
            guests = [call.result(timeout=HANG_GUARD_S) for call in calls]
        assert {g["state"] for g in guests} == {"ACTIVE"}
        assert [agent.driver.peak_concurrent_builds(h) for h in HOSTS] == [4, 4, 4]


def test_agent_threads_set_by_the_operator_bound_the_builds(pool_conf, hosts_db, served_agent):
    conf = pool_conf(agent_threads=2)
    with served_agent(conf, hosts_db) as agent:
        guests = build_all_at_once(conf, hosts_db, 6)
        assert {g["state"] for g in guests} == {"ACTIVE"}
        peaks = [agent.driver.peak_concurrent_builds(h) for h in HOSTS]
        assert max(peaks) <= 2 and sum(peaks) >= 2


def test_calls_start_no_thread_while_a_prestarted_one_is_idle(pool_conf, hosts_db,
                                                              monkeypatch, served_agent):
    conf = pool_conf(boot_seconds=0.0)
    started = []
    real_start = threading.Thread.start

    def counting_start(thread):
        started.append(thread.name)
        real_start(thread)

    with served_agent(conf, hosts_db) as agent:
        try:
            api = ComputeAPI(conf, hosts_db)
            monkeypatch.setattr(threading.Thread, "start", counting_start)
            for i in range(20):
                assert api.ping(HOSTS[i % len(HOSTS)])["alive"] is True
            monkeypatch.undo()
            # futurist's pool (oslo.messaging's default) starts one per call: 20.
            assert started == []
            assert agent.servers[0]._work_executor.threads == len(HOSTS) * 4
        finally:
            monkeypatch.undo()
