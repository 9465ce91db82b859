"""Block storage on the simulated fleet: volumes on host-local and rack-shared backends."""

import threading
import uuid as uuidlib

import pytest

from fleetflow.common.exceptions import InvalidInput, NotFound, StaleFence
from fleetflow.compute.exceptions import (
    BackendNotFound,
    BackendUnreachable,
    CapacityExceeded,
    HostDead,
    InstanceNotFound,
    VolumeCreateFailed,
    VolumeInUse,
    VolumeMismatch,
    VolumeNotFound,
    VolumeTypeUnsupported,
)

INVENTORY = {"VCPU": {"total": 8, "allocation_ratio": 1.0, "reserved": 0},
             "MEMORY_MB": {"total": 8192, "allocation_ratio": 1.0, "reserved": 0}}
SMALL = {"VCPU": 1, "MEMORY_MB": 512}
# h1 and h2 share rack k1; h3 is in another rack; h4's rack has the same
# name as k1 but stands in another zone, so it must not reach k1's storage.
TOPOLOGY = {"h1": {"region": "r1", "zone": "z1", "rack": "k1"},
            "h2": {"region": "r1", "zone": "z1", "rack": "k1"},
            "h3": {"region": "r1", "zone": "z1", "rack": "k2"},
            "h4": {"region": "r1", "zone": "z2", "rack": "k1"}}
BACKENDS = {
    "h1-local": {"scope": "host", "host_name": "h1", "region": "r1", "zone": "z1",
                 "rack": "k1", "capacity_gb": 100, "volume_types": ["local-ssd"]},
    "k1-shared": {"scope": "rack", "host_name": None, "region": "r1", "zone": "z1",
                  "rack": "k1", "capacity_gb": 50, "volume_types": ["ssd", "hdd"]},
    "k2-shared": {"scope": "rack", "host_name": None, "region": "r1", "zone": "z1",
                  "rack": "k2", "capacity_gb": 50, "volume_types": ["ssd"]},
}


def _storage_fleet(driver) -> None:
    driver.add_hosts({name: INVENTORY for name in TOPOLOGY})
    driver.add_host_topology(TOPOLOGY)
    driver.add_backends(BACKENDS)


@pytest.fixture
def make_driver(fake_drivers):
    return lambda **kwargs: fake_drivers(_storage_fleet, **kwargs)


@pytest.fixture
def driver(make_driver):
    return make_driver()


def rows(driver, sql, *args):
    with driver.store.read() as conn:
        return conn.execute(sql, args).fetchall()


def guest_with(driver, host, uuid):
    return driver.build_instance(host, uuid, SMALL, image="cirros")


# -- create --------------------------------------------------------------------


def test_create_is_idempotent_and_counts_one_create(driver):
    first = driver.create_volume("k1-shared", "vol-1", 10, volume_type="ssd")
    assert first["status"] == "available" and first["backend"] == "k1-shared"
    assert (first["size_gb"], first["volume_type"]) == (10, "ssd")
    assert first["attached_to"] is None and first["create_count"] == 1
    again = driver.create_volume("k1-shared", "vol-1", 10)  # no type: the one it has
    assert again == first
    assert driver.volume_create_count("vol-1") == 1
    assert [v["volume_id"] for v in driver.list_volumes("k1-shared")] == ["vol-1"]


def test_concurrent_creates_of_one_id_make_one_volume(make_driver):
    drivers = [make_driver(), make_driver()]  # two processes' drivers on one file
    barrier = threading.Barrier(8)
    results, errors = [], []

    def create(i):
        barrier.wait()
        try:
            results.append(drivers[i % 2].create_volume("k1-shared", "vol-race", 5))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(results) == 8
    assert drivers[0].volume_create_count("vol-race") == 1
    assert len(rows(drivers[0], "SELECT * FROM volumes")) == 1


def test_a_different_backend_size_or_type_for_an_existing_id_is_refused(driver):
    driver.create_volume("k1-shared", "vol-1", 10, volume_type="ssd")
    with pytest.raises(VolumeMismatch):
        driver.create_volume("k1-shared", "vol-1", 11)
    with pytest.raises(VolumeMismatch):
        driver.create_volume("k2-shared", "vol-1", 10)
    with pytest.raises(VolumeMismatch):
        driver.create_volume("k1-shared", "vol-1", 10, volume_type="hdd")
    assert driver.get_volume("k1-shared", "vol-1")["size_gb"] == 10
    assert driver.list_volumes("k2-shared") == []
    assert driver.volume_create_count("vol-1") == 1


def test_capacity_counts_live_volumes_only(driver):
    driver.create_volume("k1-shared", "a", 30)
    driver.create_volume("k1-shared", "b", 20)
    with pytest.raises(CapacityExceeded) as err:
        driver.create_volume("k1-shared", "c", 1)
    assert err.value.details == {"backend": "k1-shared", "resource_class": "DISK_GB",
                                 "used": 50, "requested": 1, "capacity": 50}
    assert driver.get_volume("k1-shared", "c") is None
    assert driver.volume_create_count("c") == 0
    # Another backend's space is its own.
    assert driver.create_volume("k2-shared", "d", 50)["status"] == "available"
    driver.delete_volume("k1-shared", "b")
    assert driver.create_volume("k1-shared", "c", 20)["status"] == "available"


def test_volume_type_must_be_one_of_the_backends(driver):
    with pytest.raises(VolumeTypeUnsupported) as err:
        driver.create_volume("k1-shared", "vol-1", 5, volume_type="nvme")
    assert err.value.details["volume_types"] == ["ssd", "hdd"]
    with pytest.raises(VolumeTypeUnsupported):
        driver.create_volume("h1-local", "vol-1", 5, volume_type="ssd")
    assert driver.volume_create_count("vol-1") == 0
    assert driver.create_volume("h1-local", "vol-1", 5,
                                volume_type="local-ssd")["volume_type"] == "local-ssd"


def test_unknown_backend_is_not_found_for_every_call(driver):
    calls = [lambda: driver.create_volume("nowhere", "vol-1", 5),
             lambda: driver.delete_volume("nowhere", "vol-1"),
             lambda: driver.get_volume("nowhere", "vol-1"),
             lambda: driver.list_volumes("nowhere"),
             lambda: driver.set_backend_faults("nowhere", fail_next_creates=1)]
    for call in calls:
        with pytest.raises(BackendNotFound) as err:
            call()
        assert isinstance(err.value, NotFound)
    assert rows(driver, "SELECT * FROM volumes") == []
    assert rows(driver, "SELECT * FROM backend_faults") == []


def test_bad_backend_specs_are_refused(driver):
    with pytest.raises(InvalidInput):
        driver.add_backends({"odd": {"scope": "region", "capacity_gb": 1}})
    with pytest.raises(InvalidInput):
        driver.add_backends({"orphan": {"scope": "host", "capacity_gb": 1}})
    with pytest.raises(InvalidInput):
        driver.add_backends({"rackless": {"scope": "rack", "region": "r1", "capacity_gb": 1}})
    with pytest.raises(InvalidInput):
        driver.create_volume("k1-shared", "empty", 0)
    assert driver.backends == sorted(BACKENDS)


def test_injected_create_failures_are_shared_through_the_file(make_driver):
    first, second = make_driver(), make_driver()
    assert first.set_backend_faults("k1-shared", fail_next_creates=2) == {
        "backend": "k1-shared", "fail_next_creates": 2}
    # A create refused for another reason spends no fault.
    with pytest.raises(CapacityExceeded):
        second.create_volume("k1-shared", "huge", 500)
    for _ in range(2):
        with pytest.raises(VolumeCreateFailed):
            second.create_volume("k1-shared", "vol-1", 5)
        assert first.get_volume("k1-shared", "vol-1") is None
        assert first.volume_create_count("vol-1") == 0
    assert first.get_backend_faults("k1-shared")["fail_next_creates"] == 0
    assert second.create_volume("k1-shared", "vol-1", 5)["create_count"] == 1
    # An existing volume is returned, whatever faults the backend has now.
    first.set_backend_faults("k1-shared", fail_next_creates=1)
    assert second.create_volume("k1-shared", "vol-1", 5)["create_count"] == 1
    assert second.get_backend_faults("k1-shared")["fail_next_creates"] == 1


# -- delete --------------------------------------------------------------------


def test_delete_is_idempotent_and_frees_the_space(driver):
    missing = driver.delete_volume("k1-shared", "never")
    assert missing == {"volume_id": "never", "backend": "k1-shared", "status": "deleted",
                       "deleted": False}
    driver.create_volume("k1-shared", "vol-1", 50)
    first = driver.delete_volume("k1-shared", "vol-1")
    assert first["deleted"] is True and first["status"] == "deleted"
    again = driver.delete_volume("k1-shared", "vol-1")
    assert again["deleted"] is False and again["status"] == "deleted"
    assert driver.get_volume("k1-shared", "vol-1")["status"] == "deleted"
    assert driver.list_volumes("k1-shared") == []
    assert len(driver.list_volumes("k1-shared", include_deleted=True)) == 1
    assert driver.create_volume("k1-shared", "other", 50)["status"] == "available"


def test_a_deleted_volume_created_again_is_a_second_create(driver):
    driver.create_volume("k1-shared", "vol-1", 5)
    driver.delete_volume("k1-shared", "vol-1")
    again = driver.create_volume("k2-shared", "vol-1", 7)
    assert (again["backend"], again["size_gb"], again["status"]) == ("k2-shared", 7,
                                                                     "available")
    assert driver.volume_create_count("vol-1") == 2
    assert driver.get_volume("k1-shared", "vol-1") is None


def test_deleting_through_the_wrong_backend_is_refused(driver):
    driver.create_volume("k1-shared", "vol-1", 5)
    with pytest.raises(VolumeMismatch):
        driver.delete_volume("k2-shared", "vol-1")
    assert driver.get_volume("k1-shared", "vol-1")["status"] == "available"


def test_an_attached_volume_cannot_be_deleted(driver):
    guest_with(driver, "h2", "i-1")
    driver.create_volume("k1-shared", "vol-1", 5)
    driver.attach_volume("h2", "i-1", "vol-1")
    with pytest.raises(VolumeInUse) as err:
        driver.delete_volume("k1-shared", "vol-1")
    assert err.value.details["attached_to"] == "i-1"
    assert driver.get_volume("k1-shared", "vol-1")["status"] == "in-use"


# -- attach --------------------------------------------------------------------


def test_host_local_volumes_attach_on_their_host_only(driver):
    guest_with(driver, "h1", "i-1")
    guest_with(driver, "h2", "i-2")
    driver.create_volume("h1-local", "vol-1", 5)
    with pytest.raises(BackendUnreachable) as err:
        driver.attach_volume("h2", "i-2", "vol-1")
    assert err.value.details == {"host": "h2", "backend": "h1-local", "scope": "host"}
    assert driver.get_instance("h2", "i-2")["volumes"] == []
    assert driver.get_volume("h1-local", "vol-1")["status"] == "available"
    assert driver.attach_volume("h1", "i-1", "vol-1")["volumes"] == ["vol-1"]
    volume = driver.get_volume("h1-local", "vol-1")
    assert (volume["status"], volume["attached_to"], volume["attached_host"]) == (
        "in-use", "i-1", "h1")


def test_rack_volumes_attach_in_their_rack_only(driver):
    for host in ("h1", "h2", "h3", "h4"):
        guest_with(driver, host, f"i-{host}")
    for name in ("v1", "v2", "v3", "v4"):
        driver.create_volume("k1-shared", name, 5)
    driver.attach_volume("h1", "i-h1", "v1")
    driver.attach_volume("h2", "i-h2", "v2")
    with pytest.raises(BackendUnreachable):
        driver.attach_volume("h3", "i-h3", "v3")  # another rack
    with pytest.raises(BackendUnreachable):
        driver.attach_volume("h4", "i-h4", "v4")  # a rack of that name in another zone
    assert [v["status"] for v in driver.list_volumes("k1-shared")] == [
        "in-use", "in-use", "available", "available"]


def test_a_host_of_unknown_topology_reaches_no_rack(driver):
    driver.add_hosts({"h9": INVENTORY})
    guest_with(driver, "h9", "i-9")
    driver.create_volume("k1-shared", "vol-1", 5)
    with pytest.raises(BackendUnreachable):
        driver.attach_volume("h9", "i-9", "vol-1")


def test_a_volume_attaches_to_one_instance_at_a_time(driver):
    guest_with(driver, "h1", "i-1")
    guest_with(driver, "h2", "i-2")
    driver.create_volume("k1-shared", "vol-1", 5)
    driver.attach_volume("h1", "i-1", "vol-1")
    assert driver.attach_volume("h1", "i-1", "vol-1")["volumes"] == ["vol-1"]  # again: fine
    with pytest.raises(VolumeInUse):
        driver.attach_volume("h2", "i-2", "vol-1")
    assert driver.get_instance("h2", "i-2")["volumes"] == []
    assert driver.get_volume("k1-shared", "vol-1")["attached_to"] == "i-1"


def test_detach_makes_it_available_then_deletable(driver):
    guest_with(driver, "h1", "i-1")
    guest_with(driver, "h2", "i-2")
    driver.create_volume("k1-shared", "vol-1", 5)
    driver.attach_volume("h1", "i-1", "vol-1")
    assert driver.detach_volume("h1", "i-1", "vol-1")["volumes"] == []
    volume = driver.get_volume("k1-shared", "vol-1")
    assert (volume["status"], volume["attached_to"], volume["attached_host"]) == (
        "available", None, None)
    driver.attach_volume("h2", "i-2", "vol-1")  # free for another instance now
    driver.detach_volume("h2", "i-2", "vol-1")
    assert driver.delete_volume("k1-shared", "vol-1")["deleted"] is True
    with pytest.raises(VolumeNotFound):
        driver.attach_volume("h1", "i-1", "vol-1")
    assert driver.get_instance("h1", "i-1")["volumes"] == []


def test_destroying_the_instance_releases_its_volumes(driver):
    guest_with(driver, "h1", "i-1")
    driver.create_volume("k1-shared", "vol-1", 5)
    driver.attach_volume("h1", "i-1", "vol-1")
    driver.destroy_instance("h1", "i-1")
    assert driver.get_volume("k1-shared", "vol-1")["status"] == "available"
    assert driver.delete_volume("k1-shared", "vol-1")["deleted"] is True


def test_a_volume_stays_in_use_while_another_copy_holds_it(driver):
    guest_with(driver, "h1", "i-1")
    driver.create_volume("k1-shared", "vol-1", 5)
    driver.attach_volume("h1", "i-1", "vol-1")
    driver.start_move("h2", "m1", "cold", "i-1", "h1", SMALL)
    driver.confirm_move("h2", "m1")
    assert driver.get_instance("h2", "i-1")["volumes"] == ["vol-1"]
    driver.destroy_instance("h1", "i-1")  # nothing there any more
    assert driver.get_volume("k1-shared", "vol-1")["status"] == "in-use"
    driver.destroy_instance("h2", "i-1")
    assert driver.get_volume("k1-shared", "vol-1")["status"] == "available"


def test_volume_ids_unknown_to_the_table_attach_as_before(driver):
    guest_with(driver, "h3", "i-1")
    assert driver.attach_volume("h3", "i-1", "legacy-vol")["volumes"] == ["legacy-vol"]
    assert driver.detach_volume("h3", "i-1", "legacy-vol")["volumes"] == []
    assert rows(driver, "SELECT * FROM volumes") == []
    with pytest.raises(InstanceNotFound):
        driver.attach_volume("h3", "nobody", "legacy-vol")


# -- forced detach -------------------------------------------------------------


def test_a_forced_detach_frees_a_volume_whose_guest_host_died(driver):
    guest_with(driver, "h1", "i-1")
    driver.create_volume("k1-shared", "vol-1", 5)
    driver.attach_volume("h1", "i-1", "vol-1")
    driver.set_faults("h1", dead=True)
    with pytest.raises(HostDead):  # a plain detach needs the guest's host
        driver.detach_volume("h1", "i-1", "vol-1")
    with pytest.raises(VolumeInUse):
        driver.delete_volume("k1-shared", "vol-1", host="h2")

    answer = driver.force_detach_volume("k1-shared", "vol-1", host="h2")

    assert (answer["status"], answer["attached_to"], answer["attached_host"],
            answer["detached"]) == ("available", None, None, True)
    assert driver.get_volume("k1-shared", "vol-1", host="h2")["status"] == "available"
    # The dead host's guest still names it: only the backend's side changed.
    assert [tuple(r) for r in rows(driver, "SELECT volumes FROM guests WHERE uuid = 'i-1'")] == [
        ('["vol-1"]',)]
    assert driver.delete_volume("k1-shared", "vol-1", host="h2")["deleted"] is True


def test_a_forced_detach_is_idempotent(driver):
    guest_with(driver, "h2", "i-1")
    driver.create_volume("k1-shared", "vol-1", 5)
    driver.attach_volume("h2", "i-1", "vol-1")
    assert driver.force_detach_volume("k1-shared", "vol-1")["detached"] is True
    again = driver.force_detach_volume("k1-shared", "vol-1", host="h1")
    assert (again["status"], again["detached"]) == ("available", False)
    driver.create_volume("k1-shared", "vol-2", 5)
    assert driver.force_detach_volume("k1-shared", "vol-2")["detached"] is False
    driver.delete_volume("k1-shared", "vol-2")
    gone = driver.force_detach_volume("k1-shared", "vol-2")
    assert (gone["status"], gone["detached"]) == ("deleted", False)
    assert driver.force_detach_volume("k1-shared", "never") == {
        "volume_id": "never", "backend": "k1-shared", "status": None, "detached": False}
    with pytest.raises(VolumeMismatch):
        driver.force_detach_volume("k2-shared", "vol-1")
    assert rows(driver, "SELECT * FROM volumes WHERE volume_id = 'never'") == []


def test_a_force_detached_volume_serves_another_guest_undisturbed_by_the_old(driver):
    guest_with(driver, "h1", "i-1")
    guest_with(driver, "h2", "i-2")
    driver.create_volume("k1-shared", "vol-1", 5)
    driver.attach_volume("h1", "i-1", "vol-1")
    driver.set_faults("h1", dead=True)
    driver.force_detach_volume("k1-shared", "vol-1", host="h2")
    driver.attach_volume("h2", "i-2", "vol-1")
    driver.set_faults("h1", dead=False)
    # The old copy is gone for good: its release leaves the new attachment be,
    # and it cannot take the volume back while another guest holds it.
    with pytest.raises(VolumeInUse):
        driver.attach_volume("h1", "i-1", "vol-1")
    driver.destroy_instance("h1", "i-1")
    volume = driver.get_volume("k1-shared", "vol-1")
    assert (volume["status"], volume["attached_to"], volume["attached_host"]) == (
        "in-use", "i-2", "h2")


def test_a_forced_detach_is_fenced_and_routed_like_a_delete(driver):
    guest_with(driver, "h1", "i-1")
    driver.create_volume("h1-local", "vol-1", 5)
    driver.create_volume("k1-shared", "vol-2", 5, fence={"key": "job-7", "token": 3})
    driver.attach_volume("h1", "i-1", "vol-1")
    driver.attach_volume("h1", "i-1", "vol-2")
    with pytest.raises(StaleFence):
        driver.force_detach_volume("k1-shared", "vol-2", host="h2",
                                   fence={"key": "job-7", "token": 2})
    with pytest.raises(BackendUnreachable):  # another rack
        driver.force_detach_volume("k1-shared", "vol-2", host="h3")
    with pytest.raises(BackendUnreachable):
        driver.force_detach_volume("h1-local", "vol-1", host="h2")
    with pytest.raises(BackendNotFound):
        driver.force_detach_volume("nowhere", "vol-2", host="h2")
    driver.set_faults("h1", dead=True)
    with pytest.raises(HostDead):  # a dead host routes nothing
        driver.force_detach_volume("k1-shared", "vol-2", host="h1")
    with pytest.raises(HostDead):  # a host-local backend died with its host
        driver.force_detach_volume("h1-local", "vol-1", host="h1")
    assert [v["status"] for v in driver.list_volumes("k1-shared")] == ["in-use"]
    assert driver.force_detach_volume("k1-shared", "vol-2", host="h2",
                                      fence={"key": "job-7", "token": 3})["detached"]


# -- fencing and routing -------------------------------------------------------


def test_a_stale_fence_is_refused_and_writes_nothing(driver):
    guest_with(driver, "h1", "i-1")
    fence = {"key": "job-7", "token": 3}
    stale = {"key": "job-7", "token": 2}
    driver.create_volume("k1-shared", "vol-1", 5, fence=fence)
    with pytest.raises(StaleFence):
        driver.create_volume("k1-shared", "vol-2", 5, fence=stale)
    assert driver.get_volume("k1-shared", "vol-2") is None
    with pytest.raises(StaleFence):
        driver.attach_volume("h1", "i-1", "vol-1", fence=stale)
    assert driver.get_volume("k1-shared", "vol-1")["status"] == "available"
    driver.attach_volume("h1", "i-1", "vol-1", fence=fence)
    driver.detach_volume("h1", "i-1", "vol-1", fence=fence)
    with pytest.raises(StaleFence):
        driver.delete_volume("k1-shared", "vol-1", fence=stale)
    assert driver.get_volume("k1-shared", "vol-1")["status"] == "available"
    assert driver.delete_volume("k1-shared", "vol-1",
                                fence={"key": "job-7", "token": 4})["deleted"] is True


def test_calls_through_a_host_need_one_that_reaches_the_backend(driver):
    assert driver.create_volume("h1-local", "vol-1", 5, host="h1")["backend"] == "h1-local"
    with pytest.raises(BackendUnreachable):
        driver.create_volume("h1-local", "vol-2", 5, host="h2")
    with pytest.raises(BackendUnreachable):
        driver.get_volume("k1-shared", "vol-1", host="h3")
    assert driver.list_volumes("k1-shared", host="h2") == []
    driver.set_faults("h1", dead=True)
    with pytest.raises(HostDead):  # its disk went with it
        driver.delete_volume("h1-local", "vol-1", host="h1")
    # Faults only need a served host to route them.
    assert driver.set_backend_faults("h1-local", fail_next_creates=1,
                                     host="h3")["fail_next_creates"] == 1
    assert driver.get_volume("h1-local", "vol-1")["status"] == "available"


# -- over RPC ------------------------------------------------------------------


@pytest.fixture
def rpc_fleet(tmp_path):
    from fleetflow.common import config
    from fleetflow.compute import agent as compute_agent
    from fleetflow.compute import messaging
    from fleetflow.compute.rpcapi import ComputeAPI
    from fleetflow.persistence.db import Database
    from fleetflow.persistence.models import Host, StorageBackend

    conf = config.load(args=[], environ={})
    conf.set_override("state_dir", str(tmp_path))
    conf.set_override("connection", f"sqlite:///{tmp_path / 'fleetflow.db'}",
                      group="database")
    conf.set_override("topic", f"storage-{uuidlib.uuid4().hex[:8]}", group="messaging")
    conf.set_override("rpc_timeout", 10, group="messaging")
    database = Database.from_conf(conf)
    database.upgrade()
    with database.session() as session:
        for name, where in TOPOLOGY.items():
            session.add(Host(uuid=str(uuidlib.uuid4()), name=name, inventory=INVENTORY,
                             **where))
        for name, spec in BACKENDS.items():
            session.add(StorageBackend(uuid=str(uuidlib.uuid4()), name=name, **spec))
    agent = compute_agent.serve_fleet(conf, database, hosts=["h1", "h2", "h3"])
    try:
        yield agent, ComputeAPI(conf, database)
    finally:
        agent.stop()
        messaging.forget_transport(conf)
        database.dispose()


def test_rpc_round_trip(rpc_fleet):
    agent, api = rpc_fleet
    # The agent learnt the backends its hosts reach from the database.
    assert agent.driver.backends == ["h1-local", "k1-shared", "k2-shared"]
    created = api.create_volume("h2", "k1-shared", "vol-1", 10, volume_type="ssd",
                                fence={"key": "job-1", "token": 1})
    assert created["status"] == "available" and created["create_count"] == 1
    assert api.create_volume("h1", "k1-shared", "vol-1", 10)["create_count"] == 1
    with pytest.raises(BackendUnreachable):
        api.create_volume("h2", "h1-local", "vol-2", 5)
    with pytest.raises(BackendNotFound):
        api.list_volumes("h1", "nowhere")
    with pytest.raises(StaleFence):
        api.delete_volume("h2", "k1-shared", "vol-1", fence={"key": "job-1", "token": 0})

    # Faults are the backend's, in the state file the agent's driver shares.
    assert agent.driver.set_backend_faults(
        "h1-local", fail_next_creates=1)["fail_next_creates"] == 1
    with pytest.raises(VolumeCreateFailed):
        api.create_volume("h1", "h1-local", "vol-2", 5)
    assert api.create_volume("h1", "h1-local", "vol-2", 5)["create_count"] == 1

    api.build_instance("h2", "i-1", SMALL)
    api.attach_volume("h2", "i-1", "vol-1")
    with pytest.raises(BackendUnreachable):
        api.attach_volume("h2", "i-1", "vol-2")
    with pytest.raises(VolumeInUse):
        api.delete_volume("h1", "k1-shared", "vol-1")
    assert [v["attached_to"] for v in api.list_volumes("h1", "k1-shared")] == ["i-1"]
    api.detach_volume("h2", "i-1", "vol-1")
    assert api.delete_volume("h1", "k1-shared", "vol-1")["deleted"] is True
    assert api.delete_volume("h1", "k1-shared", "vol-1")["deleted"] is False
    assert api.list_volumes("h1", "k1-shared") == []
    assert [v["volume_id"] for v in api.list_volumes("h1", "h1-local")] == ["vol-2"]
    assert agent.driver.volume_create_count("vol-1") == 1


def test_rpc_force_detach_when_the_guest_host_died(rpc_fleet):
    agent, api = rpc_fleet
    api.create_volume("h2", "k1-shared", "vol-1", 5, fence={"key": "job-1", "token": 1})
    api.build_instance("h1", "i-1", SMALL)
    api.attach_volume("h1", "i-1", "vol-1")
    agent.driver.set_faults("h1", dead=True)
    with pytest.raises(VolumeInUse):
        api.delete_volume("h2", "k1-shared", "vol-1")
    with pytest.raises(HostDead):
        api.force_detach_volume("h1", "k1-shared", "vol-1")
    with pytest.raises(BackendUnreachable):
        api.force_detach_volume("h3", "k1-shared", "vol-1")
    with pytest.raises(StaleFence):
        api.force_detach_volume("h2", "k1-shared", "vol-1",
                                fence={"key": "job-1", "token": 0})

    assert api.force_detach_volume("h2", "k1-shared", "vol-1")["detached"] is True
    assert api.force_detach_volume("h2", "k1-shared", "vol-1")["detached"] is False
    assert api.delete_volume("h2", "k1-shared", "vol-1")["deleted"] is True
    assert api.force_detach_volume("h2", "k1-shared", "vol-1")["status"] == "deleted"
