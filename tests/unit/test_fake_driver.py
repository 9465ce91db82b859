"""The fake hypervisor against its own promises: idempotent, bounded, faulty on demand."""

import threading

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
def make_driver(state_path):
    drivers = []

    def _make(**kwargs):
        driver = FakeDriver(state_path, **kwargs)
        driver.add_hosts({"h1": INVENTORY, "h2": INVENTORY})
        drivers.append(driver)
        return driver

    yield _make
    for driver in drivers:
        driver.close()


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


def test_close_fails_calls_hanging_on_a_dead_host(driver):
    driver.set_faults("h1", dead=True, hang_seconds=30)
    errors = []

    def call():
        try:
            driver.ping("h1")
        except HostDead as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    caller.join(0.2)
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


def test_migrate_moves_the_guest_once(driver):
    driver.build_instance("h1", "m1", SMALL, image="cirros")
    driver.attach_volume("h1", "m1", "v1")
    moved = driver.migrate_instance("h2", "m1", source_host="h1")
    again = driver.migrate_instance("h2", "m1", source_host="h1")
    assert moved["host"] == again["host"] == "h2"
    assert moved["volumes"] == ["v1"] and moved["migrated_from"] == "h1"
    assert driver.get_instance("h1", "m1") is None
    assert driver.usage("h2")["VCPU"] == 1 and driver.usage("h1") == {}
    assert driver.spawn_count("m1") == 1


def test_rebuild_reimages_once_and_evacuation_fences_the_source(driver):
    driver.build_instance("h1", "e1", SMALL, image="cirros")
    assert driver.rebuild_instance("h1", "e1", image="ubuntu")["image"] == "ubuntu"
    assert driver.rebuild_instance("h1", "e1", image="ubuntu")["image"] == "ubuntu"
    # h1 dies; e1 is rebuilt on h2 from h1.
    driver.set_faults("h1", dead=True)
    rebuilt = driver.rebuild_instance("h2", "e1", resources=SMALL, image="ubuntu",
                                      source_host="h1")
    assert driver.rebuild_instance("h2", "e1", resources=SMALL, image="ubuntu",
                                   source_host="h1") == rebuilt
    assert rebuilt["host"] == "h2" and rebuilt["state"] == "ACTIVE"
    # h1 comes back: the evacuated copy is gone, not running twice.
    driver.set_faults("h1", dead=False)
    assert driver.list_instances("h1") == []
    assert driver.spawn_count("e1") == 1


def test_fence_instance_applies_when_the_host_comes_back(make_driver):
    first = make_driver()
    first.build_instance("h1", "stale-copy", SMALL)
    first.build_instance("h1", "keeper", SMALL)
    first.fence_instance("h1", "stale-copy")
    first.close()
    # Another process (same state file) serving h1 after a restart.
    second = make_driver()
    assert second.cleanup_all_evacuated() == {"h1": ["stale-copy"]}
    assert [g["uuid"] for g in second.list_instances("h1")] == ["keeper"]


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
    """0-second boots take one write instead of two; what a host ends with is the same."""
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
