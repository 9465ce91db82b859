"""The candidates' placement snapshot: after any write, by this process or another, the
kept snapshot must equal one read from scratch (and show the change)."""

from __future__ import annotations

import uuid

import pytest

from fleetflow.persistence.db import Database
from fleetflow.persistence.placement import catalog
from fleetflow.persistence.placement.snapshot import SnapshotCache
from fleetflow.persistence.placement.store import PlacementStore

AGGREGATE = str(uuid.UUID(int=0xA))
CLASSES = ("VCPU", "MEMORY_MB", "CUSTOM_OLD", "CUSTOM_NEW")
# Requests whose fitting providers a snapshot keeps, and patches when providers change.
FITTING_ASKED = ({"VCPU": 1}, {"VCPU": 4, "MEMORY_MB": 2048}, {"CUSTOM_NEW": 1})


def contents(snapshot) -> dict:
    return {"rows": list(snapshot.rows.values()), "trees": snapshot.trees,
            "inventories": snapshot.inventories, "usages": snapshot.usages,
            "traits": snapshot.traits, "aggregates": snapshot.aggregates,
            "summaries": {rp: snapshot.summary_json(rp) for rp in snapshot.rows},
            # Kept per class once asked for, and patched when providers change.
            "free": {rc: snapshot.free(rc) for rc in CLASSES},
            "minus_free": {rc: snapshot.minus_free(rc) for rc in CLASSES},
            "fitting": [snapshot.fitting(resources) for resources in FITTING_ASKED]}


@pytest.fixture
def stores(db):
    """(the reading store, a writer on its own engine as another process would be)."""
    other = Database(db.url)
    yield PlacementStore(db), PlacementStore(other)
    other.dispose()


@pytest.fixture
def hosts(stores):
    _reader, writer = stores
    uuids = []
    # Enough providers that a few changes are read again alone, not with a full reload.
    for i in range(12):
        rp = writer.create_provider(f"host-{i:02d}")["uuid"]
        writer.set_inventories(rp, 0, {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}})
        uuids.append(rp)
    return uuids


def check(reader) -> dict:
    """The reader's kept snapshot, asserted equal to a fresh read, as plain data."""
    with reader.database.read_session() as session:
        kept = contents(reader.snapshots.current(session))
        fresh = contents(SnapshotCache().current(session))
    assert kept == fresh
    return kept


def test_claims_and_releases_by_another_writer_are_seen(stores, hosts):
    reader, writer = stores
    assert check(reader)["usages"] == {}
    consumer = str(uuid.uuid4())
    writer.claim_many({consumer: {hosts[1]: {"VCPU": 3}}}, "p", "u")
    assert check(reader)["usages"] == {hosts[1]: {"VCPU": 3}}
    writer.delete_allocations(consumer)
    assert check(reader)["usages"] == {}


def test_inventory_trait_and_aggregate_changes_are_seen(stores, hosts):
    reader, writer = stores
    check(reader)
    writer.set_inventories(hosts[0], 1, {"VCPU": {"total": 2, "allocation_ratio": 4.0}})
    writer.set_traits(hosts[2], 1, ["HW_CPU_X86_AVX2"])
    # Aggregates as before microversion 1.19: no generation moves.
    writer.in_transaction(catalog.set_aggregates, hosts[3], [AGGREGATE], None)
    seen = check(reader)
    assert seen["inventories"][hosts[0]]["VCPU"].capacity == 8
    assert set(seen["inventories"][hosts[0]]) == {"VCPU"}
    assert seen["traits"][hosts[2]] == {"HW_CPU_X86_AVX2"}
    assert seen["aggregates"][hosts[3]] == {AGGREGATE}


def test_new_children_renames_and_deletions_are_seen(stores, hosts):
    reader, writer = stores
    check(reader)
    child = writer.create_provider("nic", parent_provider_uuid=hosts[0])["uuid"]
    assert check(reader)["trees"][hosts[0]] == [hosts[0], child]
    writer.update_provider(hosts[3], "a-first-name")
    assert next(iter(check(reader)["trees"])) == hosts[3]  # trees in name order
    writer.delete_provider(child)
    writer.delete_provider(hosts[2])
    seen = check(reader)
    assert child not in seen["summaries"] and hosts[2] not in seen["trees"]


def test_a_renamed_resource_class_is_seen(stores, hosts):
    reader, writer = stores
    writer.in_transaction(catalog.create_resource_class, "CUSTOM_OLD")
    writer.set_inventories(hosts[1], 1, {"CUSTOM_OLD": {"total": 5}})
    writer.claim_many({str(uuid.uuid4()): {hosts[1]: {"CUSTOM_OLD": 2}}}, "p", "u")
    assert check(reader)["usages"][hosts[1]] == {"CUSTOM_OLD": 2}
    writer.in_transaction(catalog.rename_resource_class, "CUSTOM_OLD", "CUSTOM_NEW")
    seen = check(reader)
    assert set(seen["inventories"][hosts[1]]) == {"CUSTOM_NEW"}
    assert seen["usages"][hosts[1]] == {"CUSTOM_NEW": 2}


def test_an_unchanged_database_keeps_the_same_snapshot(stores, hosts):
    reader, _writer = stores
    with reader.database.read_session() as session:
        first = reader.snapshots.current(session)
    with reader.database.read_session() as session:
        assert reader.snapshots.current(session) is first
