"""Fleet documents (the format of ``fleetflow fleet load``) sized for tests."""

from __future__ import annotations

#: Two racks of three hosts with 4 VCPUs each, one rack with GPUs, one with a
#: blue sticker, and a rack-wide storage backend each; flavors ``m1.small``
#: (1 VCPU) and ``m1.half`` (2 VCPUs), image ``cirros``.
SMALL_FLEET = {
    "profiles": {"small": {"inventory": {
        "VCPU": {"total": 4, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 8192, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 100, "allocation_ratio": 1.0}}}},
    "rack_storage": {"capacity_gb": 1000, "volume_types": ["ssd"]},
    "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
        {"name": "r1", "hosts": 3, "profile": "small", "capabilities": {"gpu": "true"}},
        {"name": "r2", "hosts": 3, "profile": "small", "capabilities": {"sticker": "blue"}},
    ]}]}],
    "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20},
                {"id": "2", "name": "m1.half", "vcpus": 2, "ram_mb": 4096, "disk_gb": 40}],
    "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
}

#: Two racks of four hosts with their own disks and a rack-wide backend each:
#: room to evacuate a host or two onto the others.
EVACUATION_FLEET = {
    "profiles": {"std": {"inventory": {
        "VCPU": {"total": 8, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 16384, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 200, "allocation_ratio": 1.0}},
        "local_storage": {"capacity_gb": 500, "volume_types": ["local"]}}},
    "rack_storage": {"capacity_gb": 1000, "volume_types": ["ssd"]},
    "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
        {"name": "r1", "hosts": 4, "profile": "std"},
        {"name": "r2", "hosts": 4, "profile": "std", "capabilities": {"gpu": "true"}},
    ]}]}],
    "flavors": SMALL_FLEET["flavors"],
    "images": SMALL_FLEET["images"],
}
