"""How much a simulated host holds, and how much of it its guests use.

Usage is summed over the host's guests' rows in the state file (``fake_store``)
whatever their state: a row is its guest's claim from the request on, so builds
waiting for a build slot and moves arriving cannot overcommit the host.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetflow.compute.exceptions import CapacityExceeded


def capacity(inventory: Mapping) -> dict[str, float]:
    """Usable amount per resource class, as Placement computes it.

    ``(total - reserved) * allocation_ratio``: the same formula as the placement
    store, so a correct scheduler is never refused and an overcommitting one is.
    """
    usable = {}
    for rc, inv in inventory.items():
        if isinstance(inv, Mapping):
            total = inv.get("total", 0)
            usable[rc] = (total - inv.get("reserved", 0)) * float(inv.get("allocation_ratio", 1.0))
        else:
            usable[rc] = float(inv)
    return usable


def usage(conn, host: str) -> dict[str, int]:
    # Summed inside SQLite (json_each): no row decoding in Python per build.
    return {rc: int(used) for rc, used in conn.execute(
        "SELECT j.key, SUM(j.value) FROM guests g, json_each(g.resources) j "
        "WHERE g.host = ? GROUP BY j.key", (host,))}


def check_capacity(conn, host: str, inventory: Mapping, resources: Mapping) -> None:
    """Raise CapacityExceeded when ``resources`` do not fit next to the host's guests."""
    usable = capacity(inventory)
    used = usage(conn, host)
    for rc, amount in resources.items():
        if not amount:
            continue
        if rc not in usable:
            raise CapacityExceeded(f"host {host} has no {rc} inventory", host=host,
                                   resource_class=rc, requested=amount)
        if used.get(rc, 0) + amount > usable[rc]:
            raise CapacityExceeded(
                f"host {host}: {rc} {used.get(rc, 0)} used + {amount} requested "
                f"exceeds capacity {usable[rc]:g}", host=host, resource_class=rc,
                used=used.get(rc, 0), requested=amount, capacity=usable[rc])
