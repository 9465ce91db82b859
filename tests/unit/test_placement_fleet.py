"""Hosts and storage backends become resource providers, idempotently."""

from __future__ import annotations

from fleetflow.persistence.models import Host, StorageBackend
from fleetflow.persistence.placement.fleet import register_host, register_storage_backend
from fleetflow.persistence.placement.store import PlacementStore

HOST_UUID = "00000000-0000-0000-0000-0000000000a1"


def _host(**inventory):
    return Host(uuid=HOST_UUID, name="host-001", region="r", zone="z", rack="rack-1",
                inventory=inventory or {"VCPU": {"total": 64, "allocation_ratio": 4.0,
                                                 "reserved": 0}},
                capabilities={"gpu": "true"}, traits=["HW_CPU_X86_AVX2", "fast-nic"])


def test_register_host_is_idempotent_and_converges(db):
    store = PlacementStore(db)
    first = register_host(store, _host())
    assert store.get_inventories(HOST_UUID)[1]["VCPU"]["allocation_ratio"] == 4.0
    assert store.get_traits(HOST_UUID)[1] == ["CUSTOM_COMPUTE_HOST", "CUSTOM_FAST_NIC",
                                              "HW_CPU_X86_AVX2"]
    again = register_host(store, _host())
    assert again["generation"] == first["generation"]  # nothing changed, nothing bumped
    changed = register_host(store, _host(VCPU={"total": 32}, MEMORY_MB={"total": 1024}))
    assert changed["generation"] == first["generation"] + 1
    assert set(store.get_inventories(HOST_UUID)[1]) == {"VCPU", "MEMORY_MB"}


def test_register_inside_the_callers_transaction(db):
    with db.session() as session:
        session.add(_host())
        session.flush()
        register_host(session, _host())
        backend = StorageBackend(uuid="00000000-0000-0000-0000-0000000000b1", name="local-1",
                                 scope="host", region="r", zone="z", rack="rack-1",
                                 host_name="host-001", capacity_gb=500,
                                 volume_types=["ssd"])
        register_storage_backend(session, backend)
    store = PlacementStore(db)
    rp = store.get_provider("00000000-0000-0000-0000-0000000000b1")
    assert rp["name"] == "storage:local-1"
    assert rp["parent_provider_uuid"] == HOST_UUID
    assert store.get_inventories(rp["uuid"])[1]["DISK_GB"]["total"] == 500
    assert store.get_traits(rp["uuid"])[1] == ["CUSTOM_STORAGE_BACKEND",
                                               "CUSTOM_VOLUME_TYPE_SSD"]
    found = store.allocation_candidates({"DISK_GB": 10}, ["CUSTOM_STORAGE_BACKEND"])
    assert list(found["provider_summaries"]) == [rp["uuid"]]
