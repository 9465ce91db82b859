"""One contract for both PlacementClient implementations.

``LocalPlacement`` calls the store in-process; ``HttpPlacement`` goes through
our /placement API served by a real werkzeug server on 127.0.0.1. Both must
behave the same. The last test drives the same server with OpenStack's own
client (``openstack`` + osc-placement).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import uuid

import pytest

from fleetflow.common.exceptions import StaleFence
from fleetflow.persistence import fences
from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.client import LocalPlacement
from fleetflow.persistence.placement.http_client import HttpPlacement
from fleetflow.persistence.placement.store import PlacementStore


def new_uuid() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def store(db):
    return PlacementStore(db)


@pytest.fixture
def hosts(store):
    """Three providers: two hosts (8 VCPU, 4096 MB) and a disk pool (100 GB)."""
    made = []
    for name, inventory in (("host-a", {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}),
                            ("host-b", {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}),
                            ("disks", {"DISK_GB": {"total": 100}})):
        rp = store.create_provider(name)["uuid"]
        store.set_inventories(rp, 0, inventory)
        made.append(rp)
    return made


@pytest.fixture(params=["local", "http"])
def placement(request, store):
    if request.param == "local":
        return LocalPlacement(store)
    base = request.getfixturevalue("live_server")
    # Small chunks so claim_many crosses several POSTs and must stay all-or-nothing.
    return HttpPlacement(base + "/placement", "admin", chunk_size=16)


def held(placement, consumer):
    return placement.get_allocations(consumer).allocations


def test_claim_new_consumer(placement, hosts):
    a, _, _ = hosts
    consumer = new_uuid()
    assert placement.claim(consumer, {a: {"VCPU": 2}}, "proj", "user") == {a: {"VCPU": 2}}
    got = placement.get_allocations(consumer)
    assert (got.allocations, got.generation) == ({a: {"VCPU": 2}}, 1)
    assert (got.project_id, got.user_id) == ("proj", "user")
    assert placement.usages(provider=a) == {"VCPU": 2, "MEMORY_MB": 0}
    assert placement.usages(project_id="proj") == {"VCPU": 2}


def test_claim_merges_and_is_idempotent(placement, hosts):
    a, _, disks = hosts
    consumer = new_uuid()
    placement.claim(consumer, {a: {"VCPU": 2, "MEMORY_MB": 512}}, "proj", "user")
    placement.claim(consumer, {disks: {"DISK_GB": 10}}, "proj", "user")
    both = {a: {"VCPU": 2, "MEMORY_MB": 512}, disks: {"DISK_GB": 10}}
    assert held(placement, consumer) == both
    generation = placement.get_allocations(consumer).generation
    # A task that runs twice claims the same amounts, not twice the amounts.
    placement.claim(consumer, {disks: {"DISK_GB": 10}}, "proj", "user")
    assert held(placement, consumer) == both
    assert placement.get_allocations(consumer).generation == generation
    assert placement.usages(provider=disks) == {"DISK_GB": 10}


def test_capacity_is_final(placement, hosts):
    a, _, _ = hosts
    placement.claim(new_uuid(), {a: {"VCPU": 6}}, "proj", "user")
    consumer = new_uuid()
    with pytest.raises(errors.CapacityExceeded) as caught:
        placement.claim(consumer, {a: {"VCPU": 3}}, "proj", "user")
    assert caught.value.status == 409
    assert held(placement, consumer) == {}


def test_a_claim_on_a_provider_that_is_gone_is_a_lost_claim(placement, hosts, store):
    a, b, _ = hosts
    store.delete_provider(b)
    consumer = new_uuid()
    with pytest.raises(errors.ProviderGone) as caught:
        placement.claim(consumer, {a: {"VCPU": 1}, b: {"VCPU": 1}}, "proj", "user")
    # Placement's 400, and to the claim tasks a conflict like a full host.
    assert caught.value.status == 400
    assert isinstance(caught.value, errors.PlacementConflict)
    assert held(placement, consumer) == {}


def test_concurrent_claims_on_one_consumer_all_land(placement, hosts):
    a, b, disks = hosts
    consumer = new_uuid()
    parts = [{a: {"VCPU": 1}}, {a: {"MEMORY_MB": 256}}, {b: {"VCPU": 2}},
             {b: {"MEMORY_MB": 128}}, {disks: {"DISK_GB": 5}}]
    with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:
        list(pool.map(lambda part: placement.claim(consumer, part, "proj", "user"), parts))
    expected = {a: {"VCPU": 1, "MEMORY_MB": 256}, b: {"VCPU": 2, "MEMORY_MB": 128},
                disks: {"DISK_GB": 5}}
    assert held(placement, consumer) == expected


def test_claim_many_is_all_or_nothing_and_rerunnable(placement, hosts):
    a, b, _ = hosts
    claims = {new_uuid(): {(a if i % 2 else b): {"VCPU": 1}} for i in range(12)}
    placement.claim_many(claims, "proj", "user")
    assert placement.usages(provider=a)["VCPU"] == 6
    placement.claim_many(claims, "proj", "user")  # a re-run after a crash
    assert placement.usages(provider=a)["VCPU"] == 6
    too_many = {new_uuid(): {a: {"VCPU": 1}} for _ in range(40)}
    with pytest.raises(errors.CapacityExceeded):
        placement.claim_many(too_many, "proj", "user")
    assert placement.usages(provider=a)["VCPU"] == 6
    assert all(held(placement, c) == {} for c in too_many)


def test_release(placement, hosts):
    a, _, disks = hosts
    consumer = new_uuid()
    placement.claim(consumer, {a: {"VCPU": 2}, disks: {"DISK_GB": 20}}, "proj", "user")
    assert placement.release(consumer, providers=[disks]) is True
    assert held(placement, consumer) == {a: {"VCPU": 2}}
    assert placement.release(consumer) is True
    assert placement.get_allocations(consumer).generation is None
    assert placement.release(consumer) is False
    assert placement.usages(provider=a)["VCPU"] == 0


def test_release_many_drops_every_consumer_in_one_write(placement, hosts, monkeypatch):
    from fleetflow.persistence.placement import client as placement_client

    a, _, disks = hosts
    held_ones = [new_uuid() for _ in range(5)]
    for consumer in held_ones:
        placement.claim(consumer, {a: {"VCPU": 1}, disks: {"DISK_GB": 2}}, "proj", "user")
    empty = new_uuid()
    # Chunks of two: three writes, each all or nothing.
    monkeypatch.setattr(placement_client, "RELEASE_CHUNK", 2)
    assert placement.release_many([*held_ones, empty]) == 5
    assert all(held(placement, c) == {} for c in [*held_ones, empty])
    assert placement.usages(provider=a)["VCPU"] == 0
    assert placement.release_many(held_ones) == 0


def test_move_hands_source_to_migration_consumer(placement, hosts):
    a, b, _ = hosts
    instance, migration = new_uuid(), new_uuid()
    placement.claim(instance, {a: {"VCPU": 4}}, "proj", "user")
    source = placement.move(instance, migration, {b: {"VCPU": 4}}, "proj", "user")
    assert source == {a: {"VCPU": 4}}
    assert held(placement, migration) == {a: {"VCPU": 4}}
    assert held(placement, instance) == {b: {"VCPU": 4}}
    # Running the move again (the task re-ran) changes nothing.
    placement.move(instance, migration, {b: {"VCPU": 4}}, "proj", "user")
    assert placement.usages(provider=a)["VCPU"] == 4
    assert placement.usages(provider=b)["VCPU"] == 4
    placement.release(migration)
    assert placement.usages(provider=a)["VCPU"] == 0


def test_move_rerun_after_confirm_does_not_count_the_destination_twice(placement, hosts):
    a, b, _ = hosts
    instance, migration = new_uuid(), new_uuid()
    placement.claim(instance, {a: {"VCPU": 4}}, "proj", "user")
    placement.move(instance, migration, {b: {"VCPU": 4}}, "proj", "user")
    assert placement.get_allocations(migration).consumer_type == "MIGRATION"
    assert placement.confirm_move(migration) is True
    # A claim task re-run after a crash, once the move was confirmed.
    placement.move(instance, migration, {b: {"VCPU": 4}}, "proj", "user")
    assert held(placement, migration) == {}
    assert held(placement, instance) == {b: {"VCPU": 4}}
    assert placement.usages(provider=b)["VCPU"] == 4
    assert placement.usages(provider=a)["VCPU"] == 0


def test_revert_move_gives_the_source_back_once(placement, hosts):
    a, b, _ = hosts
    instance, migration = new_uuid(), new_uuid()
    placement.claim(instance, {a: {"VCPU": 4}}, "proj", "user")
    placement.move(instance, migration, {b: {"VCPU": 4}}, "proj", "user")
    assert placement.revert_move(instance, migration) is True
    assert held(placement, instance) == {a: {"VCPU": 4}}
    assert held(placement, migration) == {}
    assert placement.revert_move(instance, migration) is False
    assert placement.usages(provider=a)["VCPU"] == 4
    assert placement.usages(provider=b)["VCPU"] == 0


def test_stale_fence_is_refused(placement, hosts, db):
    a, _, _ = hosts
    with db.session() as session:
        old = fences.advance(session, "job-7", "conductor-a")
        fences.advance(session, "job-7", "conductor-b")
    consumer = new_uuid()
    with pytest.raises(StaleFence):
        placement.claim(consumer, {a: {"VCPU": 1}}, "proj", "user", fence=old)
    assert held(placement, consumer) == {}


def test_candidates(placement, hosts):
    a, b, _ = hosts
    placement.claim(new_uuid(), {a: {"VCPU": 7}}, "proj", "user")
    found = placement.candidates({"VCPU": 2, "MEMORY_MB": 100})
    assert [list(r["allocations"]) for r in found["allocation_requests"]] == [[b]]
    assert found["provider_summaries"][b]["resources"]["VCPU"] == {"capacity": 8,
                                                                   "used": 0}


@pytest.mark.slow
def test_openstack_client_talks_to_our_placement(live_server, hosts, openstack_command):
    """python-openstackclient + osc-placement, unchanged, against /placement."""
    a, _, _ = hosts
    base = ["--os-auth-type", "admin_token", "--os-token", "admin",
            "--os-endpoint", f"{live_server}/placement", "--os-placement-api-version", "1.28"]

    def osc(*args, parse=True):
        done = openstack_command.run(base + list(args) + (["-f", "json"] if parse else []),
                                     env=dict(os.environ, OS_CLOUD=""))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if parse else done.stdout

    listed = osc("resource", "provider", "list")
    assert {p["name"] for p in listed} == {"host-a", "host-b", "disks"}
    consumer = new_uuid()
    osc("resource", "provider", "allocation", "set", consumer, "--allocation",
        f"rp={a},VCPU=2,MEMORY_MB=512", "--project-id", "proj", "--user-id", "user")
    shown = osc("resource", "provider", "allocation", "show", consumer)
    assert [(s["resource_provider"], s["resources"]) for s in shown] == [
        (a, {"VCPU": 2, "MEMORY_MB": 512})]
    usage = {u["resource_class"]: u["usage"]
             for u in osc("resource", "provider", "usage", "show", a)}
    assert usage == {"VCPU": 2, "MEMORY_MB": 512}
    candidates = osc("allocation", "candidate", "list", "--resource", "VCPU=7")
    assert a not in {c["resource provider"] for c in candidates}
    assert len(candidates) == 1
    osc("resource", "provider", "allocation", "delete", consumer, parse=False)
    assert osc("resource", "provider", "allocation", "show", consumer) == []
