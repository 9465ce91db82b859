"""Moves on the simulated hosts: persisted, timed, limited per host, faulty on demand."""

import contextlib
import threading
import time

import pytest

from fleetflow.common.exceptions import StaleFence
from fleetflow.compute.exceptions import (
    CapacityExceeded,
    HostDead,
    InstanceNotFound,
    LiveMigrationUnsupported,
    MoveFailed,
    SourceAlive,
)

INVENTORY = {"VCPU": {"total": 8, "allocation_ratio": 1.0, "reserved": 0},
             "MEMORY_MB": {"total": 8192, "allocation_ratio": 1.0, "reserved": 0}}
SMALL = {"VCPU": 1, "MEMORY_MB": 512}
HOSTS = ["h1", "h2", "h3"] + [f"s{i}" for i in range(6)] + [f"d{i}" for i in range(6)]
# Long enough to look at a move under way on any machine: no test waits for it.
LONG = 3600.0


@pytest.fixture
def make_driver(fake_drivers):
    return lambda **kwargs: fake_drivers(
        lambda d: d.add_hosts({name: INVENTORY for name in HOSTS}), **kwargs)


@pytest.fixture
def driver(make_driver):
    return make_driver()


@pytest.fixture
def slow(make_driver):
    """Moves that stay running until the test ends them (``finish_now``)."""
    return make_driver(migrate_seconds=LONG, live_migrate_seconds=LONG)


def finish_now(driver):
    """Bring every running move's end to now, as if its time had passed."""
    with driver.store.write() as conn:
        conn.execute("UPDATE moves SET ends_at = ? WHERE status = 'running'", (time.time(),))


def built(driver, host, uuid, volumes=()):
    guest = driver.build_instance(host, uuid, SMALL, image="cirros")
    for volume in volumes:
        guest = driver.attach_volume(host, uuid, volume)
    return guest


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"still false after {timeout} s")


def rows(driver, sql, *args):
    with driver.store.read() as conn:
        return conn.execute(sql, args).fetchall()


def nothing_written(driver, uuid, destination):
    assert driver.get_instance(destination, uuid) is None
    assert rows(driver, "SELECT * FROM moves WHERE uuid = ?", uuid) == []


# -- what each kind does --------------------------------------------------


def test_live_keeps_the_source_running_until_the_switch_over(slow):
    origin = built(slow, "h1", "v1", volumes=["vol-1"])
    move = slow.start_move("h2", "m1", "live", "v1", "h1", SMALL)
    assert move == {"migration_id": "m1", "uuid": "v1", "kind": "live", "source": "h1",
                    "destination": "h2", "status": "running", "error": None, "code": None,
                    "started_at": move["started_at"], "ends_at": move["started_at"] + LONG}
    assert slow.get_instance("h1", "v1")["state"] == "ACTIVE"
    incoming = slow.get_instance("h2", "v1")
    assert incoming["state"] == "MIGRATING" and slow.usage("h2") == SMALL
    slow.attach_volume("h1", "v1", "vol-2")  # the guest still runs on its source
    finish_now(slow)
    assert slow.get_move("h2", "m1")["status"] == "completed"
    arrived = slow.get_instance("h2", "v1")
    assert arrived["state"] == "ACTIVE" and arrived["image"] == "cirros"
    assert arrived["volumes"] == ["vol-1", "vol-2"]
    assert arrived["data_token"] == origin["data_token"]
    assert slow.get_instance("h1", "v1") is None and slow.usage("h1") == {}
    assert slow.move_count("v1") == 1 and slow.spawn_count("v1") == 1


def test_cold_powers_off_copies_and_keeps_the_source_until_confirm(slow):
    origin = built(slow, "h1", "c1", volumes=["vol-1"])
    assert slow.start_move("h2", "m1", "cold", "c1", "h1", SMALL)["status"] == "running"
    assert slow.get_instance("h1", "c1")["state"] == "SHUTOFF"
    finish_now(slow)
    assert slow.get_move("h2", "m1")["status"] == "completed"
    arrived = slow.get_instance("h2", "c1")
    assert arrived["state"] == "ACTIVE" and arrived["volumes"] == ["vol-1"]
    assert arrived["data_token"] == origin["data_token"]
    assert slow.get_instance("h1", "c1")["state"] == "SHUTOFF"
    assert slow.confirm_move("h2", "m1")["status"] == "confirmed"
    assert slow.get_instance("h1", "c1") is None
    assert slow.move_count("c1") == 1


def test_rebuild_spawns_from_the_image_with_new_data(slow):
    origin = built(slow, "h1", "r1", volumes=["vol-1"])
    slow.set_faults("h1", dead=True)
    assert slow.start_move("h2", "m1", "rebuild", "r1", "h1", SMALL,
                           image="ubuntu")["status"] == "running"
    assert slow.get_instance("h2", "r1")["state"] == "MIGRATING"
    finish_now(slow)
    assert slow.get_move("h2", "m1")["status"] == "completed"
    arrived = slow.get_instance("h2", "r1")
    assert arrived["state"] == "ACTIVE" and arrived["image"] == "ubuntu"
    assert arrived["volumes"] == [] and arrived["data_token"] != origin["data_token"]
    assert slow.spawn_count("r1", ledger="rebuilds") == 1
    assert slow.spawn_count("r1") == 1  # the build; the rebuild is in its own ledger
    # The dead source's copy stays, for the database-driven clean-up.
    assert slow.confirm_move("h2", "m1")["status"] == "confirmed"
    slow.set_faults("h1", dead=False)
    assert slow.get_instance("h1", "r1")["data_token"] == origin["data_token"]


def test_a_zero_second_move_completes_in_the_one_write_that_starts_it(driver):
    built(driver, "h1", "z1")
    writes = []
    real_write = driver.store.write

    @contextlib.contextmanager
    def counting_write():
        writes.append(1)
        with real_write() as conn:
            yield conn

    driver.store.write = counting_write
    assert driver.start_move("h2", "m1", "live", "z1", "h1", SMALL)["status"] == "completed"
    assert len(writes) == 1
    assert driver.get_move("h2", "m1")["status"] == "completed"
    assert len(writes) == 1  # polling a settled move writes nothing


@pytest.mark.parametrize("kind", ["live", "cold", "rebuild"])
def test_start_is_idempotent_by_migration_id(make_driver, kind):
    driver = make_driver(migrate_seconds=0.05, live_migrate_seconds=0.05)
    built(driver, "h1", "i1")
    if kind == "rebuild":
        driver.set_faults("h1", dead=True)
    first = driver.start_move("h2", "m1", kind, "i1", "h1", SMALL, image="cirros")
    again = driver.start_move("h2", "m1", kind, "i1", "h1", SMALL, image="cirros")
    assert again["started_at"] == first["started_at"]
    assert driver.usage("h2") == SMALL
    wait_for(lambda: driver.get_move("h2", "m1")["status"] == "completed")
    settled = driver.start_move("h2", "m1", kind, "i1", "h1", SMALL, image="cirros")
    assert settled["status"] == "completed" and settled["started_at"] == first["started_at"]
    assert driver.move_count("i1") == 1 and driver.usage("h2") == SMALL
    assert driver.spawn_count("i1", ledger="rebuilds") == (kind == "rebuild")
    with pytest.raises(MoveFailed):  # the same id for another server is a caller's bug
        driver.start_move("h2", "m1", kind, "other", "h1", SMALL)


def test_the_same_migration_id_is_retried_on_another_destination(driver):
    built(driver, "h1", "x1")
    driver.set_faults("h2", fail_next_moves=1)
    assert driver.start_move("h2", "m1", "live", "x1", "h1", SMALL)["status"] == "failed"
    assert driver.revert_move("h2", "m1")["status"] == "reverted"
    assert driver.start_move("h3", "m1", "live", "x1", "h1", SMALL)["status"] == "completed"
    assert driver.get_move("h2", "m1")["status"] == "reverted"
    assert [g["uuid"] for g in driver.list_instances("h3")] == ["x1"]
    assert driver.list_instances("h2") == [] and driver.move_count("x1") == 1


def test_a_stale_fence_is_refused(driver):
    built(driver, "h1", "f1")
    driver.start_move("h2", "m1", "cold", "f1", "h1", SMALL, fence={"key": "e", "token": 2})
    with pytest.raises(StaleFence):
        driver.confirm_move("h2", "m1", fence={"key": "e", "token": 1})
    with pytest.raises(StaleFence):
        driver.start_move("h3", "m2", "cold", "f1", "h1", SMALL, fence={"key": "e", "token": 1})
    assert driver.get_move("h2", "m1")["status"] == "completed"
    assert driver.get_move("h3", "m2") is None


# -- refused moves write nothing -----------------------------------------


def test_a_rebuild_next_to_a_living_source_is_refused(driver):
    built(driver, "h1", "a1")
    with pytest.raises(SourceAlive) as err:
        driver.start_move("h2", "m1", "rebuild", "a1", "h1", SMALL, image="cirros")
    assert err.value.code == "HOST_ALIVE" and err.value.status == 409
    assert err.value.details["host"] == "h1"
    nothing_written(driver, "a1", "h2")


@pytest.mark.parametrize("kind", ["live", "cold"])
def test_live_and_cold_need_a_living_source_with_the_guest(driver, kind):
    built(driver, "h1", "g1")
    with pytest.raises(InstanceNotFound):
        driver.start_move("h2", "m1", kind, "nobody", "h1", SMALL)
    nothing_written(driver, "nobody", "h2")
    driver.set_faults("h1", dead=True)
    with pytest.raises(HostDead) as err:
        driver.start_move("h2", "m1", kind, "g1", "h1", SMALL)
    assert err.value.details["host"] == "h1"
    nothing_written(driver, "g1", "h2")
    driver.set_faults("h2", dead=True)
    with pytest.raises(HostDead):  # a dead destination, of course, neither
        driver.start_move("h2", "m1", kind, "g1", "h3", SMALL)


def test_a_server_that_cannot_live_migrate_is_refused_before_anything_is_written(driver):
    built(driver, "h1", "n1")
    assert driver.set_server_faults("n1", live_migratable=False)["live_migratable"] is False
    with pytest.raises(LiveMigrationUnsupported) as err:
        driver.start_move("h2", "m1", "live", "n1", "h1", SMALL)
    assert err.value.code == "LIVE_MIGRATION_UNSUPPORTED"
    nothing_written(driver, "n1", "h2")
    # A cold migration still moves it.
    assert driver.start_move("h2", "m2", "cold", "n1", "h1", SMALL)["status"] == "completed"


def test_the_destination_must_have_room_from_the_request_on(driver):
    big = {"VCPU": 5, "MEMORY_MB": 512}
    driver.build_instance("h2", "resident", big)
    driver.build_instance("h1", "b1", big)
    with pytest.raises(CapacityExceeded):
        driver.start_move("h2", "m1", "live", "b1", "h1", big)
    nothing_written(driver, "b1", "h2")


# -- failures ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["live", "cold", "rebuild"])
def test_destination_death_mid_move_fails_it_and_leaves_nothing_there(slow, kind):
    origin = built(slow, "h1", "k1")
    if kind == "rebuild":
        slow.set_faults("h1", dead=True)
    slow.start_move("h2", "m1", kind, "k1", "h1", SMALL, image="cirros")
    slow.set_faults("h2", dead=True)
    with pytest.raises(HostDead):
        slow.get_move("h2", "m1")
    slow.set_faults("h2", dead=False)  # back before the move's end: it failed all the same
    move = slow.get_move("h2", "m1")
    assert move["status"] == "failed" and move["code"] == "MIGRATION_FAILED"
    assert "h2" in move["error"]
    assert slow.list_instances("h2") == [] and slow.usage("h2") == {}
    if kind == "rebuild":
        slow.set_faults("h1", dead=False)
    source = slow.get_instance("h1", "k1")
    assert source["state"] == "ACTIVE" and source["data_token"] == origin["data_token"]
    assert slow.move_count("k1") == 0


def test_source_death_mid_live_migration_fails_it_and_leaves_the_source_copy(slow):
    origin = built(slow, "h1", "l1")
    slow.start_move("h2", "m1", "live", "l1", "h1", SMALL)
    slow.set_faults("h1", dead=True)
    move = slow.get_move("h2", "m1")
    assert move["status"] == "failed" and "h1" in move["error"]
    assert slow.list_instances("h2") == []
    slow.set_faults("h1", dead=False)
    assert slow.get_instance("h1", "l1") == origin


def test_a_host_dead_at_the_switch_over_fails_the_move(slow):
    """Death written into the file by other means: the switch-over checks too."""
    built(slow, "h1", "w1")
    slow.start_move("h2", "m1", "live", "w1", "h1", SMALL)
    with slow.store.write() as conn:
        conn.execute("INSERT INTO host_faults (host, dead) VALUES ('h1', 1)")
    finish_now(slow)
    move = slow.get_move("h2", "m1")
    assert move["status"] == "failed" and "source host h1" in move["error"]
    assert slow.list_instances("h2") == []


@pytest.mark.parametrize("kind", ["live", "cold"])
def test_fail_next_moves_fails_moves_to_that_host_at_completion(slow, kind):
    for uuid in ("p1", "p2", "p3"):
        built(slow, "h1", uuid)
    slow.set_faults("h2", fail_next_moves=2)
    for index, uuid in enumerate(("p1", "p2", "p3")):
        slow.start_move("h2", f"m{index}", kind, uuid, "h1", SMALL)
    # Only at completion: under way, all three look fine.
    assert {slow.get_move("h2", f"m{i}")["status"] for i in range(3)} == {"running"}
    finish_now(slow)
    assert [slow.get_move("h2", f"m{i}")["status"] for i in range(3)] == [
        "failed", "failed", "completed"]
    assert slow.get_faults("h2")["fail_next_moves"] == 0
    assert [g["uuid"] for g in slow.list_instances("h2")] == ["p3"]
    # The failed ones left their source copies running; the moved one is gone
    # (live) or powered off until confirmed (cold).
    left = {"p1": "ACTIVE", "p2": "ACTIVE"}
    if kind == "cold":
        left["p3"] = "SHUTOFF"
    assert {g["uuid"]: g["state"] for g in slow.list_instances("h1")} == left


def test_fail_move_fails_every_move_of_that_server_until_cleared(driver):
    built(driver, "h1", "q1")
    driver.set_server_faults("q1", fail_move=True)
    move = driver.start_move("h2", "m1", "cold", "q1", "h1", SMALL)
    assert move["status"] == "failed" and move["error"] == "injected failure (fail_move)"
    assert driver.get_instance("h1", "q1")["state"] == "ACTIVE"
    assert driver.start_move("h3", "m2", "live", "q1", "h1", SMALL)["status"] == "failed"
    driver.set_server_faults("q1", fail_move=False)
    assert driver.start_move("h3", "m3", "live", "q1", "h1", SMALL)["status"] == "completed"
    assert driver.move_count("q1") == 1


# -- per-host limits ------------------------------------------------------


def most_at_once(records):
    """The most moves whose [started_at, ends_at) overlapped."""
    edges = sorted([(r["started_at"], 1) for r in records] + [(r["ends_at"], -1)
                                                              for r in records])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def run_and_watch(driver, starts, poll_host, limit):
    """Start the moves, poll until all completed; the most running at any poll."""
    for destination, migration_id, kind, uuid, source in starts:
        driver.start_move(destination, migration_id, kind, uuid, source, SMALL, image="cirros")
    peak = 0

    def settled():
        nonlocal peak
        driver.get_move(poll_host, starts[0][1])  # a poll moves the whole queue on
        statuses = [row[0] for row in rows(driver, "SELECT status FROM moves")]
        peak = max(peak, statuses.count("running"))
        assert statuses.count("running") <= limit
        return set(statuses) == {"completed"}

    wait_for(settled)
    records = [driver.get_move(dst, mid) for dst, mid, *_ in starts]
    assert most_at_once(records) <= limit
    return peak, records


def test_a_host_receives_at_most_its_incoming_limit(make_driver):
    driver = make_driver(migrate_seconds=0.2, live_migrate_seconds=0.2,
                         max_incoming_migrations=2, max_outgoing_migrations=10)
    starts = []
    for i in range(6):
        built(driver, f"s{i}", f"in{i}")
        starts.append(("d0", f"m{i}", "live" if i % 2 else "cold", f"in{i}", f"s{i}"))
    peak, records = run_and_watch(driver, starts, "d0", limit=2)
    assert peak == 2
    # Oldest first: they started in the order they were asked for.
    assert [r["started_at"] for r in records] == sorted(r["started_at"] for r in records)
    assert len(driver.list_instances("d0")) == 6


def test_a_host_sends_at_most_its_outgoing_limit(make_driver):
    driver = make_driver(migrate_seconds=0.2, live_migrate_seconds=0.2,
                         max_incoming_migrations=10, max_outgoing_migrations=2)
    starts = []
    for i in range(6):
        built(driver, "s0", f"out{i}")
        starts.append((f"d{i}", f"m{i}", "live", f"out{i}", "s0"))
    peak, _ = run_and_watch(driver, starts, "d0", limit=2)
    assert peak == 2
    assert driver.list_instances("s0") == []


def test_rebuilds_count_only_against_the_destination(make_driver):
    driver = make_driver(migrate_seconds=LONG, max_incoming_migrations=1,
                         max_outgoing_migrations=1)
    for i in range(3):
        built(driver, "s0", f"rb{i}")
    driver.set_faults("s0", dead=True)
    # The dead source sends nothing: two destinations rebuild at once ...
    assert driver.start_move("d0", "m0", "rebuild", "rb0", "s0", SMALL)["status"] == "running"
    assert driver.start_move("d1", "m1", "rebuild", "rb1", "s0", SMALL)["status"] == "running"
    # ... while each destination still receives one at a time.
    assert driver.start_move("d0", "m2", "rebuild", "rb2", "s0", SMALL)["status"] == "queued"
    assert driver.get_instance("d0", "rb2")["state"] == "MIGRATING"  # holding its capacity
    # Reverting the running one frees the slot: the queued one starts.
    driver.revert_move("d0", "m0")
    assert driver.get_move("d0", "m2")["status"] == "running"


def test_a_move_failed_by_a_death_frees_its_slots_at_once(make_driver):
    driver = make_driver(migrate_seconds=LONG, max_outgoing_migrations=1)
    built(driver, "s0", "y0")
    built(driver, "s0", "y1")
    assert driver.start_move("d0", "m0", "cold", "y0", "s0", SMALL)["status"] == "running"
    assert driver.start_move("d1", "m1", "cold", "y1", "s0", SMALL)["status"] == "queued"
    driver.set_faults("d0", dead=True)
    assert driver.get_move("d1", "m1")["status"] == "running"


def test_the_limits_hold_across_processes_sharing_the_file(make_driver):
    first = make_driver(migrate_seconds=LONG, max_incoming_migrations=1)
    second = make_driver(migrate_seconds=LONG, max_incoming_migrations=1)
    built(first, "s0", "x0")
    built(first, "s1", "x1")
    assert first.start_move("d0", "m0", "cold", "x0", "s0", SMALL)["status"] == "running"
    assert second.start_move("d0", "m1", "cold", "x1", "s1", SMALL)["status"] == "queued"
    finish_now(first)
    assert first.get_move("d0", "m0")["status"] == "completed"
    assert second.get_move("d0", "m1")["status"] == "running"


# -- confirm and revert ----------------------------------------------------


def test_confirm_only_a_completed_move_and_idempotently(slow):
    built(slow, "h1", "cf1")
    slow.start_move("h2", "m1", "live", "cf1", "h1", SMALL)
    with pytest.raises(MoveFailed) as err:
        slow.confirm_move("h2", "m1")
    assert err.value.code == "MIGRATION_FAILED"
    with pytest.raises(MoveFailed):
        slow.confirm_move("h2", "never")
    finish_now(slow)
    assert slow.confirm_move("h2", "m1")["status"] == "confirmed"
    assert slow.confirm_move("h2", "m1")["status"] == "confirmed"
    with pytest.raises(MoveFailed):
        slow.revert_move("h2", "m1")
    assert slow.get_instance("h2", "cf1")["state"] == "ACTIVE"


def test_a_failed_move_cannot_be_confirmed_but_is_reverted(driver):
    built(driver, "h1", "ff1")
    driver.set_faults("h2", fail_next_moves=1)
    driver.start_move("h2", "m1", "cold", "ff1", "h1", SMALL)
    with pytest.raises(MoveFailed):
        driver.confirm_move("h2", "m1")
    assert driver.revert_move("h2", "m1")["status"] == "reverted"
    assert driver.get_instance("h1", "ff1")["state"] == "ACTIVE"


def test_confirming_a_cold_move_leaves_a_dead_sources_copy(driver):
    built(driver, "h1", "cd1")
    driver.start_move("h2", "m1", "cold", "cd1", "h1", SMALL)
    driver.set_faults("h1", dead=True)  # after the switch-over: the move stands
    assert driver.confirm_move("h2", "m1")["status"] == "confirmed"
    driver.set_faults("h1", dead=False)
    assert driver.get_instance("h1", "cd1")["state"] == "SHUTOFF"


@pytest.mark.parametrize("kind", ["live", "cold", "rebuild"])
def test_reverting_a_move_under_way(slow, kind):
    origin = built(slow, "h1", "u1")
    if kind == "rebuild":
        slow.set_faults("h1", dead=True)
    slow.start_move("h2", "m1", kind, "u1", "h1", SMALL, image="cirros")
    assert slow.revert_move("h2", "m1")["status"] == "reverted"
    assert slow.revert_move("h2", "m1")["status"] == "reverted"
    assert slow.list_instances("h2") == [] and slow.usage("h2") == {}
    if kind == "rebuild":
        slow.set_faults("h1", dead=False)
    assert slow.get_instance("h1", "u1") == origin  # cold: powered on again
    finish_now(slow)
    assert slow.get_move("h2", "m1")["status"] == "reverted"
    assert slow.move_count("u1") == 0


def test_reverting_a_queued_move(make_driver):
    driver = make_driver(migrate_seconds=LONG, max_incoming_migrations=1)
    built(driver, "h1", "qa")
    built(driver, "h1", "qb")
    driver.start_move("h2", "m1", "cold", "qa", "h1", SMALL)
    assert driver.start_move("h2", "m2", "cold", "qb", "h1", SMALL)["status"] == "queued"
    assert driver.get_instance("h1", "qb")["state"] == "ACTIVE"  # not powered off yet
    assert driver.revert_move("h2", "m2")["status"] == "reverted"
    assert driver.get_instance("h2", "qb") is None
    assert driver.get_move("h2", "m1")["status"] == "running"


def test_reverting_a_completed_live_move_brings_it_back(driver):
    origin = built(driver, "h1", "lb", volumes=["vol-1"])
    driver.start_move("h2", "m1", "live", "lb", "h1", SMALL)
    back = driver.revert_move("h2", "m1")
    assert back["status"] == "reverted"
    assert driver.revert_move("h2", "m1") == back
    assert driver.get_instance("h2", "lb") is None
    home = driver.get_instance("h1", "lb")
    assert home["state"] == "ACTIVE" and home["volumes"] == ["vol-1"]
    assert home["data_token"] == origin["data_token"]


def test_a_completed_live_move_is_not_reverted_onto_a_dead_source(driver):
    built(driver, "h1", "ld")
    driver.start_move("h2", "m1", "live", "ld", "h1", SMALL)
    driver.set_faults("h1", dead=True)
    with pytest.raises(MoveFailed):
        driver.revert_move("h2", "m1")
    assert driver.get_move("h2", "m1")["status"] == "completed"
    assert driver.get_instance("h2", "ld")["state"] == "ACTIVE"


def test_reverting_completed_cold_and_rebuild_moves(driver):
    built(driver, "h1", "cold1")
    driver.start_move("h2", "m1", "cold", "cold1", "h1", SMALL)
    assert driver.revert_move("h2", "m1")["status"] == "reverted"
    assert driver.get_instance("h2", "cold1") is None
    assert driver.get_instance("h1", "cold1")["state"] == "ACTIVE"

    built(driver, "h3", "reb1")
    driver.set_faults("h3", dead=True)
    driver.start_move("h2", "m2", "rebuild", "reb1", "h3", SMALL, image="cirros")
    assert driver.revert_move("h2", "m2")["status"] == "reverted"
    assert driver.revert_move("h2", "m2")["status"] == "reverted"
    assert driver.get_instance("h2", "reb1") is None
    assert driver.revert_move("h2", "never") is None


def test_a_stale_move_does_not_make_a_second_copy(slow):
    """A move left under way on an unreachable host, retried elsewhere meanwhile."""
    built(slow, "h1", "st")
    slow.start_move("h2", "m1", "cold", "st", "h1", SMALL)
    slow.start_move("h3", "m1", "cold", "st", "h1", SMALL)
    with slow.store.write() as conn:  # the retry ends first
        conn.execute("UPDATE moves SET ends_at = ? WHERE destination = 'h3'", (time.time(),))
    assert slow.get_move("h3", "m1")["status"] == "completed"
    finish_now(slow)
    assert slow.get_move("h2", "m1")["status"] == "failed"
    assert slow.get_instance("h2", "st") is None
    assert slow.move_count("st") == 1


def test_polling_from_threads_completes_each_move_once(make_driver):
    driver = make_driver(migrate_seconds=0.05, max_incoming_migrations=2)
    for i in range(4):
        built(driver, f"s{i}", f"t{i}")
        driver.start_move("d0", f"m{i}", "cold", f"t{i}", f"s{i}", SMALL)

    def poll():
        wait_for(lambda: all(driver.get_move("d0", f"m{i}")["status"] == "completed"
                             for i in range(4)))

    pollers = [threading.Thread(target=poll) for _ in range(4)]
    for thread in pollers:
        thread.start()
    for thread in pollers:
        thread.join()
    assert [driver.move_count(f"t{i}") for i in range(4)] == [1] * 4
    assert len(driver.list_instances("d0")) == 4
