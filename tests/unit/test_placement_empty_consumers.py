"""Emptying many consumers at once (an evacuation's migration consumers when their
moves are done) leaves what Placement's POST /allocations of no allocations for each of
them, at its generation, leaves: one write, each provider gaining one generation."""

from __future__ import annotations

import uuid

import pytest

from fleetflow.common.exceptions import StaleFence
from fleetflow.persistence import fences
from fleetflow.persistence.placement import allocations
from fleetflow.persistence.placement.store import PlacementStore


def _cloud(db) -> tuple[PlacementStore, list[str], list[str]]:
    """Three hosts; four consumers, the first across two hosts, the last holding none."""
    store = PlacementStore(db)
    hosts = []
    for i in range(3):
        host = store.create_provider(f"host-{i}")["uuid"]
        store.set_inventories(host, 0, {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 8192}})
        hosts.append(host)
    consumers = [str(uuid.UUID(int=i + 1)) for i in range(4)]
    store.claim_many({consumers[0]: {hosts[0]: {"VCPU": 2}, hosts[1]: {"MEMORY_MB": 512}},
                      consumers[1]: {hosts[1]: {"VCPU": 1}},
                      consumers[2]: {hosts[2]: {"VCPU": 4, "MEMORY_MB": 1024}}},
                     "project", "user", consumer_type="MIGRATION")
    return store, hosts, consumers


def _state(store: PlacementStore, hosts: list[str], consumers: list[str]) -> tuple:
    """Providers' generations, each consumer's allocations (providers by index: two
    clouds' uuids differ), and the project's usages."""
    index = {h: f"host-{i}" for i, h in enumerate(hosts)}
    held = []
    for consumer in consumers:
        body = store.get_allocations(consumer)
        body["allocations"] = {index[h]: a for h, a in body["allocations"].items()}
        held.append(body)
    return ([store.get_provider(h)["generation"] for h in hosts], held,
            store.project_usages("project"))


def test_emptying_many_equals_one_write_of_nothing_for_each(db, tmp_path):
    from fleetflow.persistence.db import Database

    store, hosts, consumers = _cloud(db)
    other_db = Database(f"sqlite:///{tmp_path}/other.db")
    other_db.upgrade()
    other, _, _ = _cloud(other_db)
    other_hosts = [other.list_providers(name=f"host-{i}")[0]["uuid"] for i in range(3)]
    emptied = consumers[:2] + consumers[3:]  # the third keeps its allocations

    store.in_transaction(allocations.empty_consumers, emptied)
    held = {c: other.get_allocations(c) for c in emptied}
    other.set_allocations([allocations.ConsumerWrite(c, {}, "project", "user",
                                                     body["consumer_generation"])
                           for c, body in held.items() if body["allocations"]])

    after = _state(store, hosts, consumers)
    assert after == _state(other, other_hosts, consumers)
    assert [a["allocations"] for a in after[1]] == [
        {}, {}, {"host-2": {"generation": after[0][2], "resources": {"VCPU": 4,
                                                                    "MEMORY_MB": 1024}}}, {}]
    # Nothing is held by them any more: emptying again changes nothing.
    store.in_transaction(allocations.empty_consumers, emptied)
    assert _state(store, hosts, consumers) == after


def test_a_stale_fence_empties_nothing(db):
    store, hosts, consumers = _cloud(db)
    before = _state(store, hosts, consumers)
    stale = store.in_transaction(fences.advance, "evacuation:ev-1", "conductor-a")
    store.in_transaction(fences.advance, "evacuation:ev-1", "conductor-b")

    with pytest.raises(StaleFence):
        store.in_transaction(allocations.empty_consumers, consumers, stale)
    assert _state(store, hosts, consumers) == before
