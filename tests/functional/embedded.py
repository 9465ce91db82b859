"""An embedded cloud of ``fleetflow serve`` (API, conductors, simulated hosts) for
tests that talk to it over real HTTP: a small fleet, the cloud started and stopped,
and waiting for what it reports."""

from __future__ import annotations

import contextlib
import threading
import time

import yaml

from fleetflow.cli.serve import Cloud
from fleetflow.compute import messaging


def small_fleet(tmp_path, racks: int | list[dict]) -> str:
    """A fleet file of small hosts in zone z1, with one flavor and one image.

    ``racks``: the zone's racks (``{"name", "hosts", "profile": "small"}``), or a
    number of hosts for one rack ``r1``.
    """
    if isinstance(racks, int):
        racks = [{"name": "r1", "hosts": racks, "profile": "small"}]
    doc = {
        "profiles": {"small": {"inventory": {
            "VCPU": {"total": 8, "allocation_ratio": 1.0},
            "MEMORY_MB": {"total": 16384, "allocation_ratio": 1.0},
            "DISK_GB": {"total": 200, "allocation_ratio": 1.0}}}},
        "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": racks}]}],
        "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048,
                     "disk_gb": 20}],
        "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@contextlib.contextmanager
def serving(conf):
    """The cloud of ``conf`` serving its API in a thread; stopped afterwards."""
    cloud = Cloud(conf).start()
    threading.Thread(target=cloud.serve_forever, daemon=True).start()
    try:
        yield cloud
    finally:
        cloud.stop()
        messaging.forget_transport(conf)


def until(get, predicate, timeout: float = 120.0, interval: float = 0.1):
    """``get()`` once ``predicate`` holds for it; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if predicate(value):
            return value
        assert time.monotonic() < deadline, f"not reached: {value}"
        time.sleep(interval)
