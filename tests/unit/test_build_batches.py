"""Builds sent in batches: the client's queue and the agent's runner, each against a
real counterpart (a sender that records its batches; the fake driver)."""

from __future__ import annotations

import threading
from concurrent import futures

import pytest

from fleetflow.common.exceptions import StaleFence
from fleetflow.compute import build_batches
from fleetflow.compute.drivers.fake import FakeDriver
from fleetflow.compute.exceptions import BuildFailed, CapacityExceeded, OutcomeUnknown
from fleetflow.compute.rpc_pool import PrestartedPool

INVENTORY = {"VCPU": {"total": 4, "allocation_ratio": 1.0, "reserved": 0}}
SMALL = {"VCPU": 1}
WAIT_S = 30


class Agent:
    """A sender that answers every item with a guest, a failure or pending, as told;
    its first ``hold`` calls wait until ``held`` is set."""

    def __init__(self, hold: int = 0):
        self.batches: list[list[str]] = []
        self.hold = hold
        self.held = threading.Event()
        self.arrived = threading.Semaphore(0)
        self.answers: dict[str, object] = {}

    def send(self, server, requests, answer_within, timeout):
        self.batches.append([r["uuid"] for r in requests])
        self.arrived.release()
        if len(self.batches) <= self.hold:
            assert self.held.wait(WAIT_S)
        out = []
        for r in requests:
            answer = self.answers.get(r["uuid"], "guest")
            if answer == "guest":
                out.append({"guest": {"uuid": r["uuid"], "state": "ACTIVE"}})
            elif answer == "pending":
                out.append(build_batches.PENDING)
            else:
                out.append({"failure": build_batches.failure(answer)})
        return out


def queue_for(agent: Agent) -> build_batches.BuildQueue:
    from oslo_messaging._drivers import common as rpc_common

    def decode(failure):
        return rpc_common.deserialize_remote_exception(
            failure, ["fleetflow.common.exceptions", "fleetflow.compute.exceptions"])

    return build_batches.BuildQueue(
        agent.send, decode,
        lambda request, timeout: OutcomeUnknown(f"{request['uuid']}: {timeout}s"))


def test_a_lone_build_goes_alone_at_once():
    agent = Agent()
    guest = queue_for(agent).build("agent-1", {"host": "h1", "uuid": "vm-1"}, 5)
    assert guest == {"uuid": "vm-1", "state": "ACTIVE"}
    assert agent.batches == [["vm-1"]]


def hold_every_batch_slot(agent: Agent, queue, callers) -> list:
    first = [callers.submit(queue.build, "agent-1", {"host": "h1", "uuid": f"a{i}"}, WAIT_S)
             for i in range(build_batches.IN_FLIGHT)]
    for _ in first:
        assert agent.arrived.acquire(timeout=WAIT_S)
    return first


def test_builds_arriving_while_every_batch_is_out_leave_together(monkeypatch):
    monkeypatch.setattr(build_batches, "LINGER_S", 1.0)
    agent = Agent(hold=build_batches.IN_FLIGHT)
    queue = queue_for(agent)
    callers = futures.ThreadPoolExecutor(build_batches.IN_FLIGHT + 20)
    first = hold_every_batch_slot(agent, queue, callers)
    later = [callers.submit(queue.build, "agent-1", {"host": "h1", "uuid": f"b{i}"}, WAIT_S)
             for i in range(20)]
    # They leave in one batch, one linger later, while the first four are still out.
    assert [f.result(WAIT_S)["uuid"] for f in later] == [f"b{i}" for i in range(20)]
    assert not any(f.done() for f in first)
    assert agent.batches[build_batches.IN_FLIGHT:] == [[f"b{i}" for i in range(20)]]
    agent.held.set()
    assert [f.result(WAIT_S)["uuid"] for f in first] == [
        f"a{i}" for i in range(build_batches.IN_FLIGHT)]


def test_a_build_does_not_wait_for_slow_batches_to_come_back():
    agent = Agent(hold=build_batches.IN_FLIGHT)
    queue = queue_for(agent)
    callers = futures.ThreadPoolExecutor(build_batches.IN_FLIGHT)
    first = hold_every_batch_slot(agent, queue, callers)
    assert queue.build("agent-1", {"host": "h1", "uuid": "quick"}, WAIT_S)["uuid"] == "quick"
    assert not any(f.done() for f in first)
    agent.held.set()
    for f in first:
        f.result(WAIT_S)


def test_each_item_gets_its_own_answer_and_error_class(monkeypatch):
    monkeypatch.setattr(build_batches, "LINGER_S", 0.5)
    agent = Agent(hold=build_batches.IN_FLIGHT)
    agent.answers["bad"] = BuildFailed("injected", host="h1", uuid="bad")
    agent.answers["stale"] = StaleFence("old token", key="j", token=1, current=2)
    queue = queue_for(agent)
    callers = futures.ThreadPoolExecutor(build_batches.IN_FLIGHT + 3)
    first = hold_every_batch_slot(agent, queue, callers)
    calls = {u: callers.submit(queue.build, "agent-1", {"host": "h1", "uuid": u}, WAIT_S)
             for u in ("ok", "bad", "stale")}
    assert calls["ok"].result(WAIT_S)["uuid"] == "ok"
    with pytest.raises(BuildFailed) as failed:
        calls["bad"].result(WAIT_S)
    assert failed.value.details == {"host": "h1", "uuid": "bad"}
    with pytest.raises(StaleFence):
        calls["stale"].result(WAIT_S)
    assert sorted(agent.batches[-1]) == ["bad", "ok", "stale"]
    agent.held.set()
    for f in first:
        f.result(WAIT_S)


def test_a_pending_item_goes_again_until_its_caller_gives_up():
    agent = Agent()
    agent.answers["slow"] = "pending"
    queue = queue_for(agent)
    with pytest.raises(OutcomeUnknown, match="slow: 0.3s"):
        queue.build("agent-1", {"host": "h1", "uuid": "slow"}, 0.3)
    assert len(agent.batches) > 1
    assert {u for batch in agent.batches for u in batch} == {"slow"}
    # Once it answers, the same queue serves it.
    agent.answers["slow"] = "guest"
    assert queue.build("agent-1", {"host": "h1", "uuid": "slow"}, 5)["uuid"] == "slow"


def test_a_failed_call_fails_every_item_of_its_batch():
    def send(server, requests, answer_within, timeout):
        raise OutcomeUnknown("the agent went away")

    queue = build_batches.BuildQueue(send, None, None)
    with pytest.raises(OutcomeUnknown, match="went away"):
        queue.build("agent-1", {"host": "h1", "uuid": "vm-1"}, 5)


def test_an_old_agents_items_come_back_to_be_sent_alone():
    def send(server, requests, answer_within, timeout):
        return [build_batches.UNBATCHED] * len(requests)

    queue = build_batches.BuildQueue(send, None, None)
    assert queue.build("agent-1", {"host": "h1", "uuid": "vm-1"}, 5) is build_batches.UNBATCHED


# -- the agent's half, on the fake driver -------------------------------------------

@pytest.fixture
def driver(tmp_path):
    made = FakeDriver(str(tmp_path / "hosts.sqlite"))
    made.add_hosts({"h1": INVENTORY, "h2": INVENTORY, "dead": INVENTORY})
    yield made
    made.close()


@pytest.fixture
def runner(driver):
    pool = PrestartedPool(8, prestart=1)
    yield build_batches.BuildRunner(driver.build_instance, pool, at_once=driver.build_at_once)
    driver.interrupt()
    pool.shutdown()


def item(host, uuid, fence=None, resources=SMALL):
    return {"host": host, "uuid": uuid, "resources": resources, "image": "cirros",
            "fence": fence}


def test_a_batch_is_written_at_once_and_refusals_undo_only_their_own(driver, runner):
    runner.run([item("h1", "seed", fence={"key": "job", "token": 5})], 1)
    answers = runner.run([
        item("h1", "vm-1"),
        item("h1", "stale", fence={"key": "job", "token": 4}),
        item("h2", "huge", resources={"VCPU": 99}),
        item("h2", "vm-2", fence={"key": "job", "token": 6}),
    ], 1)
    assert [sorted(a) for a in answers] == [["guest"], ["failure"], ["failure"], ["guest"]]
    assert answers[0]["guest"]["state"] == "ACTIVE"
    assert "StaleFence" in answers[1]["failure"]
    assert "CapacityExceeded" in answers[2]["failure"]
    assert {g["uuid"] for g in driver.list_instances("h1")} == {"seed", "vm-1"}
    assert {g["uuid"] for g in driver.list_instances("h2")} == {"vm-2"}
    # The newer token the batch carried is remembered: the old one is refused now.
    with pytest.raises(StaleFence):
        driver.build_instance("h2", "late", SMALL, fence={"key": "job", "token": 5})
    with pytest.raises(CapacityExceeded):
        driver.build_instance("h2", "huge", {"VCPU": 99})


def test_an_injected_failure_fails_its_item_and_leaves_nothing(driver, runner):
    driver.set_faults("h1", fail_next=1)
    answers = runner.run([item("h1", "first"), item("h1", "second")], 1)
    assert "BuildFailed" in answers[0]["failure"]
    assert answers[1]["guest"]["uuid"] == "second"
    assert [g["uuid"] for g in driver.list_instances("h1")] == ["second"]


def test_a_hanging_host_holds_its_item_only_and_a_resend_joins_its_build(driver, runner):
    driver.set_faults("dead", dead=True, hang_seconds=WAIT_S)
    answers = runner.run([item("h1", "vm-1"), item("dead", "vm-2")], 0.2)
    assert answers[0]["guest"]["uuid"] == "vm-1"
    assert answers[1] == build_batches.PENDING
    threads = runner._pool.threads
    again = runner.run([item("dead", "vm-2")], 0.2)
    assert again == [build_batches.PENDING]
    assert runner._pool.threads == threads  # no second build started for it
    driver.set_faults("dead", dead=False)
    answers = runner.run([item("dead", "vm-2")], WAIT_S)
    assert answers[0]["guest"]["uuid"] == "vm-2"
    # One build ran for both sends: the host spawned the guest once.
    assert driver.spawn_count("vm-2") == 1


def test_destroys_are_written_at_once_a_stale_fence_refused_and_a_dead_host_alone(driver,
                                                                                   runner):
    from fleetflow.compute import destroy_batches

    runner.run([item("h1", "vm-1", fence={"key": "job", "token": 5}), item("h1", "vm-2"),
                item("h2", "vm-3"), item("dead", "vm-4")], 1)
    driver.set_faults("dead", dead=True)
    answers = destroy_batches.run(driver, [
        {"host": "h1", "uuid": "vm-1", "fence": {"key": "job", "token": 4}},
        {"host": "h1", "uuid": "vm-2", "fence": {"key": "job", "token": 5}},
        {"host": "h2", "uuid": "vm-3", "fence": {"key": "job", "token": 5}},
        {"host": "h2", "uuid": "gone"},
        {"host": "dead", "uuid": "vm-4"},
    ])
    assert "StaleFence" in answers[0]["failure"]
    assert [a.get("guest", {}).get("destroyed") for a in answers[1:4]] == [True, True, False]
    assert "HostDead" in answers[4]["failure"]
    assert [g["uuid"] for g in driver.list_instances("h1")] == ["vm-1"]
    assert driver.list_instances("h2") == []
