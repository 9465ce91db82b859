"""The fake hypervisor against its own promises: idempotent, bounded, faulty on demand."""

import contextlib
import sqlite3
import threading
import time

import pytest

from fleetflow.common.exceptions import StaleFence
from fleetflow.compute.drivers import fake_store as store
from fleetflow.compute.drivers.fake import FakeDriver
from fleetflow.compute.exceptions import (
    BuildFailed,
    CapacityExceeded,
    HostDead,
    HostNotServed,
    InstanceNotFound,
)

INVENTORY = {
    "VCPU": {"total": 8, "allocation_ratio": 2.0, "reserved": 2},  # (8-2)*2 = 12
    "MEMORY_MB": {"total": 8192, "allocation_ratio": 1.0, "reserved": 0},
    "DISK_GB": {"total": 100, "allocation_ratio": 1.0, "reserved": 0},
}
SMALL = {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}


@pytest.fixture
def state_path(tmp_path):
    return str(tmp_path / "hosts.db")


@pytest.fixture
def make_driver(fake_drivers):
    return lambda **kwargs: fake_drivers(
        lambda d: d.add_hosts({"h1": INVENTORY, "h2": INVENTORY}), **kwargs)


@pytest.fixture
def driver(make_driver):
    return make_driver()


def test_build_is_idempotent_and_counts_one_spawn(driver):
    first = driver.build_instance("h1", "u1", SMALL, image="cirros")
    again = driver.build_instance("h1", "u1", SMALL, image="cirros")
    assert first["state"] == again["state"] == "ACTIVE"
    assert again["spawn_count"] == 1
    assert driver.spawn_count("u1") == 1
    assert [g["uuid"] for g in driver.list_instances("h1")] == ["u1"]
    assert driver.list_instances("h2") == []


def test_concurrent_duplicate_builds_spawn_once(make_driver):
    driver = make_driver(boot_seconds=0.05)
    threads = [threading.Thread(target=driver.build_instance, args=("h1", "dup", SMALL))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert driver.spawn_count("dup") == 1
    assert len(driver.list_instances("h1")) == 1


def test_destroy_is_idempotent_and_keeps_the_spawn_ledger(driver):
    driver.build_instance("h1", "u1", SMALL)
    assert driver.destroy_instance("h1", "u1")["destroyed"] is True
    assert driver.destroy_instance("h1", "u1")["destroyed"] is False
    assert driver.destroy_instance("h1", "never-built")["destroyed"] is False
    assert driver.get_instance("h1", "u1") is None
    # Destroyed, but it was booted once: a double boot stays visible.
    assert driver.spawn_count("u1") == 1


def test_capacity_uses_placement_formula_and_refuses_overcommit(driver):
    for i in range(12):
        driver.build_instance("h1", f"u{i}", {"VCPU": 1})
    with pytest.raises(CapacityExceeded) as err:
        driver.build_instance("h1", "one-too-many", {"VCPU": 1})
    assert err.value.details["resource_class"] == "VCPU"
    assert err.value.details["capacity"] == 12
    assert driver.get_instance("h1", "one-too-many") is None
    # Another host is unaffected, and an unknown resource class is refused too.
    driver.build_instance("h2", "elsewhere", {"VCPU": 1})
    with pytest.raises(CapacityExceeded):
        driver.build_instance("h2", "gpu", {"GPU": 1})


def test_unknown_host_is_refused(driver):
    with pytest.raises(HostNotServed):
        driver.build_instance("h9", "u1", SMALL)


def test_boot_latency_shows_the_guest_building_first(make_driver):
    driver = make_driver(boot_seconds=0.3)
    seen = []
    builder = threading.Thread(target=driver.build_instance, args=("h1", "slow", SMALL))
    builder.start()
    while builder.is_alive():
        guest = driver.get_instance("h1", "slow")
        if guest is not None:
            seen.append(guest["state"])
    builder.join()
    assert "BUILDING" in seen
    assert driver.get_instance("h1", "slow")["state"] == "ACTIVE"


def test_concurrency_limit_really_limits(make_driver):
    driver = make_driver(boot_seconds=0.1, max_concurrent_builds=2)
    threads = [threading.Thread(target=driver.build_instance, args=("h1", f"c{i}", SMALL))
               for i in range(6)]
    threads.append(threading.Thread(target=driver.build_instance, args=("h2", "other", SMALL)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Six builds were waiting at once; never more than two ran on h1.
    assert driver.peak_concurrent_builds("h1") == 2
    assert driver.peak_concurrent_builds("h2") == 1
    assert len(driver.list_instances("h1")) == 6


def test_fail_next_builds(driver):
    driver.set_faults("h1", fail_next=2)
    for uuid in ("f1", "f2"):
        with pytest.raises(BuildFailed):
            driver.build_instance("h1", uuid, SMALL)
    assert driver.build_instance("h1", "f3", SMALL)["state"] == "ACTIVE"
    # Failed builds leave nothing behind and spawned nothing.
    assert [g["uuid"] for g in driver.list_instances("h1")] == ["f3"]
    assert driver.spawn_count("f1") == 0
    assert driver.get_faults("h1")["fail_next"] == 0


def test_fail_fraction_is_seeded(make_driver):
    def outcomes():
        driver = make_driver()
        driver.set_faults("h1", fail_fraction=0.5, seed=42)
        result = []
        for i in range(20):
            try:
                driver.build_instance("h1", f"frac{i}", {})
                result.append(True)
            except BuildFailed:
                result.append(False)
        for i in range(20):
            driver.destroy_instance("h1", f"frac{i}")
        return result

    first, second = outcomes(), outcomes()
    assert first == second
    assert 0 < first.count(False) < 20


def test_dead_host_fails_every_call_until_revived(driver):
    driver.build_instance("h1", "u1", SMALL)
    driver.set_faults("h1", dead=True)
    for call in (lambda: driver.build_instance("h1", "u2", SMALL),
                 lambda: driver.list_instances("h1"), lambda: driver.ping("h1"),
                 lambda: driver.destroy_instance("h1", "u1")):
        with pytest.raises(HostDead):
            call()
    assert driver.ping("h2")["alive"] is True
    driver.set_faults("h1", dead=False)
    assert [g["uuid"] for g in driver.list_instances("h1")] == ["u1"]


def test_call_hanging_on_a_dead_host_runs_late_when_it_comes_back(driver):
    driver.set_faults("h1", dead=True, hang_seconds=30)
    caller = threading.Thread(target=driver.build_instance, args=("h1", "late", SMALL))
    caller.start()
    caller.join(0.2)
    driver.set_faults("h1", dead=False)
    caller.join(10)
    assert not caller.is_alive()
    # Delivered late, like a queued message: the caller had given up long ago.
    assert driver.get_instance("h1", "late")["state"] == "ACTIVE"


def test_close_fails_calls_hanging_on_a_dead_host(driver, monkeypatch):
    driver.set_faults("h1", dead=True, hang_seconds=30)
    errors = []
    # Close only once the call hangs: closed any earlier, the call would find the
    # state file shut, which is not what this test is about.
    hanging = threading.Event()
    hang = driver._hang_until_revived

    def hang_and_tell(host):
        hanging.set()
        return hang(host)

    monkeypatch.setattr(driver, "_hang_until_revived", hang_and_tell)

    def call():
        try:
            driver.ping("h1")
        except HostDead as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert hanging.wait(10)
    driver.close()
    caller.join(10)
    assert not caller.is_alive()
    assert len(errors) == 1


def test_stale_fence_is_refused(driver):
    driver.build_instance("h1", "u1", SMALL, fence={"key": "job-1", "token": 2})
    with pytest.raises(StaleFence):
        driver.build_instance("h1", "u2", SMALL, fence={"key": "job-1", "token": 1})
    with pytest.raises(StaleFence):
        driver.destroy_instance("h1", "u1", fence={"key": "job-1", "token": 1})
    assert driver.get_instance("h1", "u1") is not None
    assert driver.get_instance("h1", "u2") is None
    # The same and newer tokens pass; other keys are independent.
    driver.destroy_instance("h1", "u1", fence={"key": "job-1", "token": 2})
    driver.build_instance("h1", "u3", SMALL, fence={"key": "job-1", "token": 3})
    driver.build_instance("h1", "u4", SMALL, fence={"key": "job-2", "token": 1})


def test_fences_and_guests_survive_reopening_the_state_file(make_driver):
    first = make_driver()
    first.build_instance("h1", "durable", SMALL, image="cirros",
                         fence={"key": "job", "token": 5})
    first.attach_volume("h1", "durable", "vol-1")
    first.close()
    second = make_driver()
    guest = second.get_instance("h1", "durable")
    assert guest["volumes"] == ["vol-1"] and guest["spawn_count"] == 1
    second.build_instance("h1", "durable", SMALL)
    assert second.spawn_count("durable") == 1
    with pytest.raises(StaleFence):
        second.destroy_instance("h1", "durable", fence={"key": "job", "token": 4})


def test_attach_detach_are_idempotent(driver):
    driver.build_instance("h1", "u1", SMALL)
    driver.attach_volume("h1", "u1", "v1")
    assert driver.attach_volume("h1", "u1", "v1")["volumes"] == ["v1"]
    driver.attach_volume("h1", "u1", "v2")
    assert driver.detach_volume("h1", "u1", "v1")["volumes"] == ["v2"]
    assert driver.detach_volume("h1", "u1", "v1")["volumes"] == ["v2"]
    with pytest.raises(InstanceNotFound):
        driver.attach_volume("h1", "missing", "v1")


def test_every_guest_gets_its_own_data_token(driver):
    first = driver.build_instance("h1", "d1", SMALL)
    second = driver.build_instance("h1", "d2", SMALL)
    assert first["data_token"] and second["data_token"]
    assert first["data_token"] != second["data_token"]
    # A repeated build is the same guest, with the same data.
    assert driver.build_instance("h1", "d1", SMALL)["data_token"] == first["data_token"]
    assert driver.get_instance("h1", "d1")["data_token"] == first["data_token"]


def test_the_dead_state_is_in_the_file_for_every_process(make_driver):
    first = make_driver()
    first.build_instance("h1", "u1", SMALL)
    first.set_faults("h1", dead=True, fail_next=3)
    # Another process sharing the file, and a restarted one, see h1 dead:
    # starting does not revive a host. In-memory faults do not carry over.
    second = make_driver()
    with pytest.raises(HostDead):
        second.ping("h1")
    assert second.get_faults("h1")["dead"] is True
    assert second.get_faults("h1")["fail_next"] == 0
    assert second.dead_hosts() == {"h1"}
    first.close()
    third = make_driver()
    with pytest.raises(HostDead):
        third.list_instances("h1")
    # Revived by one process: alive for all of them.
    second.set_faults("h1", dead=False)
    assert [g["uuid"] for g in third.list_instances("h1")] == ["u1"]
    assert third.dead_hosts() == set()


def test_a_call_hanging_on_a_host_another_process_revives_goes_through(make_driver):
    hanging, reviver = make_driver(), make_driver()
    reviver.set_faults("h1", dead=True)
    hanging.set_faults("h1", hang_seconds=30)
    caller, outcome = in_thread(hanging.ping, "h1")
    caller.join(0.3)
    assert caller.is_alive()
    reviver.set_faults("h1", dead=False)
    caller.join(10)
    assert not caller.is_alive() and outcome["result"]["alive"] is True


def test_ping_says_the_host_is_simulated(driver):
    answer = driver.ping("h1")
    assert answer["host"] == "h1" and answer["alive"] is True
    assert answer["simulated"] is True


def test_destroy_copies_destroys_those_guests_of_that_host_only(driver):
    for uuid in ("stale-1", "stale-2", "keeper"):
        driver.build_instance("h1", uuid, SMALL)
    driver.build_instance("h2", "stale-1", SMALL)  # the copy that lives on
    assert driver.destroy_copies("h1", ["stale-1", "stale-2", "never-here"]) == [
        "stale-1", "stale-2"]
    assert [g["uuid"] for g in driver.list_instances("h1")] == ["keeper"]
    assert [g["uuid"] for g in driver.list_instances("h2")] == ["stale-1"]
    assert driver.destroy_copies("h1", ["stale-1"]) == []
    assert driver.destroy_copies("h1", []) == []
    driver.set_faults("h1", dead=True)
    with pytest.raises(HostDead):
        driver.destroy_copies("h1", ["keeper"])
    driver.set_faults("h1", dead=False)
    assert [g["uuid"] for g in driver.list_instances("h1")] == ["keeper"]


def test_destroy_copies_keeps_an_incoming_copy(driver):
    driver.build_instance("h2", "back", SMALL)
    with driver.store.write() as conn:  # the server moving back to h1 right now
        store.insert_guest(conn, "h1", "back", "MIGRATING", None, SMALL)
    assert driver.destroy_copies("h1", ["back"]) == []
    assert driver.get_instance("h1", "back")["state"] == "MIGRATING"


def test_a_boot_interrupted_by_a_crash_is_finished_once(make_driver):
    first = make_driver()
    # What kill -9 in the middle of a boot leaves: a BUILDING row, no spawn yet.
    with first.store.write() as conn:
        store.insert_guest(conn, "h1", "half", "BUILDING", "cirros", SMALL)
    first.close()
    second = make_driver()
    assert second.get_instance("h1", "half")["state"] == "BUILDING"
    assert second.build_instance("h1", "half", SMALL)["state"] == "ACTIVE"
    assert second.build_instance("h1", "half", SMALL)["spawn_count"] == 1
    assert second.usage("h1") == SMALL


@pytest.mark.parametrize("boot_seconds", [0, 0.01])
def test_instant_and_slow_boots_leave_the_same_state(make_driver, boot_seconds):
    """0-second boots create guests ACTIVE, slow ones BUILDING until their ready_at;
    what a host ends with is the same."""
    driver = make_driver(boot_seconds=boot_seconds)
    driver.set_faults("h1", fail_next=1)
    with pytest.raises(BuildFailed):
        driver.build_instance("h1", "u1", SMALL)
    assert driver.list_instances("h1") == [] and driver.spawn_count("u1") == 0
    with driver.store.write() as conn:  # a crash mid-boot left a BUILDING row
        store.insert_guest(conn, "h1", "u2", "BUILDING", "cirros", SMALL)
    for uuid in ("u1", "u2", "u1"):
        assert driver.build_instance("h1", uuid, SMALL, image="cirros")["state"] == "ACTIVE"
    assert [driver.spawn_count(u) for u in ("u1", "u2")] == [1, 1]
    assert sorted(g["uuid"] for g in driver.list_instances("h1")) == ["u1", "u2"]
    big = dict(SMALL, VCPU=64)
    with pytest.raises(CapacityExceeded):
        driver.build_instance("h1", "u3", big)


# -- slow boots: one write to start them, none when they end ----------------


@pytest.fixture
def writes(monkeypatch):
    """``watch(driver)``: a list that gets an entry per write transaction of the driver."""
    counted = []

    def watch(driver):
        real_write = driver.store.write

        @contextlib.contextmanager
        def counting_write():
            counted.append(threading.current_thread().name)
            with real_write() as conn:
                yield conn

        monkeypatch.setattr(driver.store, "write", counting_write)
        return counted

    return watch


def raw_row(driver, host, uuid):
    """The guest's row as stored (its state column, not the state it reads as)."""
    with driver.store.read() as conn:
        return conn.execute("SELECT state, ready_at FROM guests WHERE host = ? AND uuid = ?",
                            (host, uuid)).fetchone()


def wait_for(predicate, timeout=10.0):
    """Poll until ``predicate()`` is truthy (a generous bound: a hang, not a slow machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError(f"still false after {timeout} s")


def in_thread(call, *args):
    """Run ``call`` in a thread; ``outcome`` gets its result or the exception it raised."""
    outcome = {}

    def run():
        try:
            outcome["result"] = call(*args)
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_slow_build_with_a_free_slot_is_one_write(make_driver, writes):
    driver = make_driver(boot_seconds=0.2)
    counted = writes(driver)
    guest = driver.build_instance("h1", "one", SMALL, image="cirros")
    assert len(counted) == 1
    assert guest["state"] == "ACTIVE" and guest["spawn_count"] == 1
    # The end of the boot wrote nothing: the row still says BUILDING, and its
    # ready_at, now passed, is what makes it ACTIVE.
    row = raw_row(driver, "h1", "one")
    assert row["state"] == "BUILDING" and row["ready_at"] <= time.time()
    assert driver.list_instances("h1")[0]["state"] == "ACTIVE"
    assert driver.usage("h1") == SMALL


def test_a_slow_boot_reads_building_until_its_ready_at(make_driver, writes):
    driver = make_driver(boot_seconds=0.5)
    counted = writes(driver)
    builder, outcome = in_thread(driver.build_instance, "h1", "slow", SMALL)
    first = wait_for(lambda: driver.get_instance("h1", "slow"))
    assert first["ready_at"] is not None and first["spawn_count"] == 1
    building, ended = [], []
    while builder.is_alive():
        before = time.time()
        guest = driver.get_instance("h1", "slow")
        if guest["ready_at"] > time.time():  # read before its boot ended
            building.append(guest["state"])
        elif before >= guest["ready_at"]:  # read after
            ended.append(guest["state"])
    builder.join()
    assert building and set(building) == {"BUILDING"}
    assert set(ended) <= {"ACTIVE"}
    assert outcome["result"]["state"] == "ACTIVE"
    assert driver.get_instance("h1", "slow")["state"] == "ACTIVE"
    assert len(counted) == 1


def test_the_state_rule_and_the_unbooted_filters(driver):
    now = time.time()
    with driver.store.write() as conn:
        for uuid in ("unbooted", "booting", "booted"):
            store.insert_guest(conn, "h1", uuid, "BUILDING", None, SMALL)
        store.insert_guest(conn, "h1", "migrated", "ACTIVE", None, SMALL)
        store.update_guest(conn, "h1", "booting", ready_at=now + 3600)
        store.update_guest(conn, "h1", "booted", ready_at=now - 1)
    states = {g["uuid"]: g["state"] for g in driver.list_instances("h1")}
    assert states == {"unbooted": "BUILDING", "booting": "BUILDING", "booted": "ACTIVE",
                      "migrated": "ACTIVE"}
    assert driver.get_instance("h1", "booted")["state"] == "ACTIVE"
    # A failed build's cleanup, or the start of a boot, touches unbooted guests only.
    with driver.store.write() as conn:
        for uuid in ("booting", "booted", "migrated"):
            assert store.delete_guest(conn, "h1", uuid, unbooted_only=True) == 0
            assert not store.start_boot(conn, "h1", uuid, now, "builds")
        assert store.start_boot(conn, "h1", "unbooted", now + 3600, "builds")
        assert not store.start_boot(conn, "h1", "unbooted", now, "builds")
        assert store.delete_guest(conn, "h1", "unbooted", unbooted_only=True) == 0
    assert driver.spawn_count("unbooted") == 1
    assert len(driver.list_instances("h1")) == 4


@pytest.mark.parametrize("second_boot_seconds", [0, 0.3])
def test_a_build_repeated_by_another_process_waits_for_the_boot(make_driver, writes,
                                                                 second_boot_seconds):
    first = make_driver(boot_seconds=0.6)
    second = make_driver(boot_seconds=second_boot_seconds)  # same state file
    builder, outcome = in_thread(first.build_instance, "h1", "shared", SMALL)
    booting = wait_for(lambda: second.get_instance("h1", "shared"))
    assert booting["ready_at"] is not None
    counted = writes(second)
    again = second.build_instance("h1", "shared", SMALL)
    # Returned once the boot ended, and not booted a second time.
    assert again["state"] == "ACTIVE" and time.time() >= booting["ready_at"]
    assert again["ready_at"] == booting["ready_at"]
    assert len(counted) == 1
    builder.join()
    assert outcome["result"]["state"] == "ACTIVE"
    assert second.spawn_count("shared") == 1


def test_boots_cut_short_by_a_crash_are_neither_lost_nor_repeated(make_driver, writes):
    crashed = make_driver(boot_seconds=0.2)
    with crashed.store.write() as conn:
        # Killed while it waited for a build slot: BUILDING, no boot started.
        store.insert_guest(conn, "h1", "waited", "BUILDING", "cirros", SMALL)
        # Killed mid-boot: the boot was started (and counted); it ends by itself.
        store.insert_guest(conn, "h1", "mid-boot", "BUILDING", "cirros", SMALL)
        assert store.start_boot(conn, "h1", "mid-boot", time.time() + 0.3, "builds")
    crashed.close()
    restarted = make_driver(boot_seconds=0.2)
    counted = writes(restarted)
    assert restarted.get_instance("h1", "waited")["state"] == "BUILDING"
    finished = restarted.build_instance("h1", "waited", SMALL)
    assert finished["state"] == "ACTIVE" and finished["spawn_count"] == 1
    assert len(counted) == 1  # a free slot: its boot started in the one write
    waited = restarted.build_instance("h1", "mid-boot", SMALL)
    assert waited["state"] == "ACTIVE" and waited["spawn_count"] == 1
    for uuid in ("waited", "mid-boot"):
        assert restarted.build_instance("h1", uuid, SMALL)["spawn_count"] == 1
    assert restarted.usage("h1") == {rc: 2 * n for rc, n in SMALL.items()}


def test_a_build_waiting_for_a_slot_holds_its_capacity_and_starts_later(make_driver, writes):
    driver = make_driver(boot_seconds=0.1, max_concurrent_builds=1)
    counted = writes(driver)
    assert driver._take_build_slot("h1")  # another build holds h1's only slot
    builder, outcome = in_thread(driver.build_instance, "h1", "queued", SMALL)
    waiting = wait_for(lambda: driver.get_instance("h1", "queued"))
    assert waiting["state"] == "BUILDING" and waiting["ready_at"] is None
    assert driver.usage("h1") == SMALL and driver.spawn_count("queued") == 0
    driver._give_back_build_slot("h1")
    builder.join(10)
    assert outcome["result"]["state"] == "ACTIVE"
    assert driver.spawn_count("queued") == 1
    assert len(counted) == 2  # claimed, then booted once it had the slot
    assert driver.peak_concurrent_builds("h1") == 1


def test_contended_slots_keep_the_limit_and_boot_everything_once(make_driver):
    driver = make_driver(boot_seconds=0.1, max_concurrent_builds=3)
    threads = [in_thread(driver.build_instance, "h1", f"c{i}", SMALL) for i in range(9)]
    for thread, _ in threads:
        thread.join()
    assert all(outcome["result"]["state"] == "ACTIVE" for _, outcome in threads)
    assert driver.peak_concurrent_builds("h1") == 3
    assert [driver.spawn_count(f"c{i}") for i in range(9)] == [1] * 9


def test_failed_slow_builds_never_start_a_boot(make_driver, monkeypatch):
    driver = make_driver(boot_seconds=0.1, max_concurrent_builds=1)
    started = []
    real_start_boot = store.start_boot

    def spying_start_boot(conn, host, uuid, ready_at, ledger):
        started.append(uuid)
        return real_start_boot(conn, host, uuid, ready_at, ledger)

    monkeypatch.setattr(store, "start_boot", spying_start_boot)
    driver.set_faults("h1", fail_next=2)
    with pytest.raises(BuildFailed):  # a free slot
        driver.build_instance("h1", "f1", SMALL)
    assert driver._take_build_slot("h1")  # slots contended
    builder, outcome = in_thread(driver.build_instance, "h1", "f2", SMALL)
    waiting = wait_for(lambda: driver.get_instance("h1", "f2"))
    assert waiting["ready_at"] is None
    driver._give_back_build_slot("h1")
    builder.join(10)
    assert isinstance(outcome["error"], BuildFailed)
    assert started == [] and driver.list_instances("h1") == []
    assert driver.spawn_count("f1") == driver.spawn_count("f2") == 0
    assert driver.build_instance("h1", "f3", SMALL)["state"] == "ACTIVE"
    assert started == ["f3"]


def test_shutting_down_ends_a_sleeping_boot_now(make_driver):
    driver = make_driver(boot_seconds=60)
    builder, outcome = in_thread(driver.build_instance, "h1", "long", SMALL)
    wait_for(lambda: driver.get_instance("h1", "long"))
    driver.interrupt()
    builder.join(10)
    assert not builder.is_alive()
    assert outcome["result"]["state"] == "ACTIVE"
    assert driver.spawn_count("long") == 1


@pytest.mark.parametrize("kind", ["live", "cold"])
def test_moving_and_destroying_a_guest_active_by_its_ready_at(make_driver, kind):
    driver = make_driver(boot_seconds=0.05)
    built = driver.build_instance("h1", "r1", SMALL, image="cirros")
    assert raw_row(driver, "h1", "r1")["state"] == "BUILDING"
    move = driver.start_move("h2", "m-r1", kind, "r1", "h1", SMALL)
    assert move["status"] == "completed"
    moved = driver.get_instance("h2", "r1")
    assert moved["state"] == "ACTIVE" and moved["data_token"] == built["data_token"]
    driver.confirm_move("h2", "m-r1")
    assert driver.get_instance("h1", "r1") is None
    assert driver.build_instance("h2", "r1", SMALL)["spawn_count"] == 0  # moved, not built
    assert driver.destroy_instance("h2", "r1")["destroyed"] is True
    assert driver.spawn_count("r1") == 1 and driver.move_count("r1") == 1


def test_an_old_state_file_gains_ready_at(state_path):
    with contextlib.closing(sqlite3.connect(state_path)) as conn, conn:
        conn.execute(
            "CREATE TABLE guests (host TEXT NOT NULL, uuid TEXT NOT NULL, state TEXT NOT NULL,"
            " image TEXT, resources TEXT NOT NULL, volumes TEXT NOT NULL, migrated_from TEXT,"
            " created_at REAL NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (host, uuid))")
        conn.executemany(
            "INSERT INTO guests VALUES (?, ?, ?, NULL, '{\"VCPU\": 1}', '[]', NULL, 0, 0)",
            [("h1", "old-active", "ACTIVE"), ("h1", "old-building", "BUILDING")])
    driver = FakeDriver(state_path, boot_seconds=0.05)
    driver.add_hosts({"h1": INVENTORY, "h2": INVENTORY})
    try:
        states = {g["uuid"]: g["state"] for g in driver.list_instances("h1")}
        assert states == {"old-active": "ACTIVE", "old-building": "BUILDING"}
        assert driver.build_instance("h1", "old-building", {"VCPU": 1})["state"] == "ACTIVE"
        assert driver.spawn_count("old-building") == 1
        # The data column came too: old guests have no token, new ones do,
        # and an old guest still moves (its unknown data with it).
        assert driver.get_instance("h1", "old-active")["data_token"] is None
        assert driver.build_instance("h1", "new", {"VCPU": 1})["data_token"]
        driver.start_move("h2", "m-old", "live", "old-active", "h1", {"VCPU": 1})
        moved = driver.get_instance("h2", "old-active")
        assert moved["state"] == "ACTIVE" and moved["data_token"] is None
    finally:
        driver.close()


def test_two_processes_upgrading_one_old_file_at_once(state_path):
    """The loser of the race sees "duplicate column" and carries on."""
    store.GuestStore(state_path).close()  # the column exists now

    class StaleSchema:
        """A connection that read the table's columns before the other process added one."""

        def __init__(self, conn):
            self.conn = conn

        def execute(self, sql, *args):
            if sql.startswith("PRAGMA table_info"):
                return []
            return self.conn.execute(sql, *args)

    with contextlib.closing(sqlite3.connect(state_path)) as conn:
        store.add_ready_at(StaleSchema(conn))
        store.add_data(StaleSchema(conn))
        columns = [row[1] for row in conn.execute("PRAGMA table_info(guests)")]
    assert columns.count("ready_at") == 1 and columns.count("data") == 1
