"""The candidates' direct path (one group, trees without sharing providers) must give
exactly what the general search gives: the same requests, in the same order, with the
same summaries."""

from __future__ import annotations

import uuid

import pytest

from fleetflow.persistence.placement import catalog, tree_candidates
from fleetflow.persistence.placement.store import PlacementStore

AGGREGATES = [str(uuid.UUID(int=0xA0 + i)) for i in range(2)]
AVX2 = "HW_CPU_X86_AVX2"


@pytest.fixture
def store(db):
    """Hosts with room of their own, some with a child NIC (one with VCPU too, so that
    its tree has two ways), traits and aggregates on some, and some usage."""
    store = PlacementStore(db)
    claims = {}
    for i in range(12):
        host = store.create_provider(f"host-{i:02d}")["uuid"]
        store.set_inventories(host, 0, {"VCPU": {"total": 8 + i},
                                        "MEMORY_MB": {"total": 4096, "reserved": 512}})
        generation = 1
        if i % 2:
            store.set_traits(host, generation, [AVX2])
            generation += 1
        if i % 3 == 0:
            store.in_transaction(catalog.set_aggregates, host, [AGGREGATES[i % 2]], generation)
        if i % 4 == 1:
            nic = store.create_provider(f"host-{i:02d}-nic", parent_provider_uuid=host)["uuid"]
            inventory = {"SRIOV_NET_VF": {"total": 4}}
            if i == 5:
                inventory["VCPU"] = {"total": 2}
            store.set_inventories(nic, 0, inventory)
        claims[str(uuid.uuid4())] = {host: {"VCPU": i % 5 + 1, "MEMORY_MB": 256 * (i % 3 + 1)}}
    store.claim_many(claims, "p", "u")
    return store


def request(resources, required=(), forbidden=(), aggregates=(), refused=(),
            root_required=(), root_forbidden=()) -> dict:
    group = {"resources": resources, "required": [set(r) for r in required],
             "forbidden": set(forbidden), "aggregates": [set(a) for a in aggregates],
             "refused_aggregates": set(refused), "in_tree": None}
    return {"groups": {"": group}, "group_policy": "none",
            "root_required": [set(r) for r in root_required],
            "root_forbidden": set(root_forbidden), "same_subtrees": [], "limit": None}


REQUESTS = [
    request({"VCPU": 1}),
    request({"VCPU": 2, "MEMORY_MB": 1024}),
    request({"VCPU": 1, "SRIOV_NET_VF": 1}),
    request({"VCPU": 1}, required=[{AVX2}]),
    request({"VCPU": 1}, forbidden=[AVX2]),
    request({"VCPU": 1}, aggregates=[{AGGREGATES[0]}]),
    request({"VCPU": 1}, refused=[AGGREGATES[1]]),
    request({"VCPU": 1}, root_forbidden=[AVX2]),
    request({"VCPU": 9}),
    request({"VCPU": 100}),
]


@pytest.mark.parametrize("nested_aware", [True, False])
@pytest.mark.parametrize("wanted", REQUESTS)
def test_direct_path_finds_what_the_search_finds(store, monkeypatch, wanted, nested_aware):
    with store.database.read_session() as session:
        world = store.snapshots.current(session)
    direct = tree_candidates.find_groups(world, wanted, nested_aware)
    monkeypatch.setattr(tree_candidates, "_single_group", lambda _request: None)
    searched = tree_candidates.find_groups(world, wanted, nested_aware)
    assert direct == searched
    if wanted["groups"][""]["resources"] == {"VCPU": 1}:
        assert direct["allocation_requests"]  # the comparison is not of two empty lists
