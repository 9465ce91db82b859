"""The fleet's capacity at a glance: total, used and free per resource class, at every level.

Placement knows each provider's inventory and usage; the rows know where each
host and storage backend stands (region, zone, rack) and what state a host is
in. This adds them up per region, zone and rack, so an operator sees what is
left where without summing hosts by hand. ``total`` is what placement lets be
allocated (``(total - reserved) * allocation_ratio``, as ``services/hosts.py``
reads it), so ``used`` never exceeds it.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import evacuations as evacuation_rows
from fleetflow.persistence.models import Host, StorageBackend, utcnow
from fleetflow.services import hosts as host_views

#: The levels a report can stop at (``--by``): hosts are always counted.
LEVELS = ("region", "zone", "rack", "host")


def _add(into: dict, capacity: dict) -> None:
    for resource_class, amounts in capacity.items():
        mine = into.setdefault(resource_class, {"used": 0, "total": 0, "free": 0})
        for key in ("used", "total", "free"):
            mine[key] += amounts[key]


def _level(name: str) -> dict:
    return {"name": name, "resources": {}, "instances": 0, "host_count": 0, "states": {}}


def _count(level: dict, host: dict) -> None:
    _add(level["resources"], host["resources"])
    level["instances"] += host["instances"]
    level["host_count"] += 1
    level["states"][host["state"]] = level["states"].get(host["state"], 0) + 1


def report(database, service_down_time: float, *, region: str | None = None,
           zone: str | None = None, by: str = "host") -> dict:
    """The capacity of the fleet (of one region or zone), nested down to ``by``.

    ``{"resources", "instances", "host_count", "states", "regions": [{..., "zones": [{...,
    "racks": [{..., "hosts": [...]}]}]}], "backends": [...]}``, every level with
    its resources (``{class: {used, total, free}}``), instance count and hosts by
    state; each host also with its state and the evacuation holding it.
    """
    if by not in LEVELS:
        raise ValueError(f"by must be one of {', '.join(LEVELS)}")
    now = utcnow()
    with database.read_session() as session:
        query = sa.select(Host).order_by(Host.region, Host.zone, Host.rack, Host.name)
        backends_query = sa.select(StorageBackend).order_by(StorageBackend.name)
        if region:
            query = query.where(Host.region == region)
            backends_query = backends_query.where(StorageBackend.region == region)
        if zone:
            query = query.where(Host.zone == zone)
            backends_query = backends_query.where(StorageBackend.zone == zone)
        hosts = list(session.scalars(query))
        backends = list(session.scalars(backends_query))
        counts = host_views.instance_counts(session, [h.name for h in hosts])
        capacity = host_views.capacities(session, [h.uuid for h in hosts]
                                         + [b.uuid for b in backends])
        rows = [{"name": h.name, "region": h.region, "zone": h.zone, "rack": h.rack,
                 "state": evacuation_rows.effective_host_state(h, service_down_time, now),
                 "evacuation_id": h.evacuation_id, "instances": counts.get(h.name, 0),
                 # Set down, not silent: fenced (recovery, a rebuild evacuation, an
                 # operator's forced down); placement has its disabled trait.
                 "fenced": h.state == states.HOST_DOWN, "reason": h.state_reason,
                 "resources": capacity.get(h.uuid, {})} for h in hosts]
        storage = [{"name": b.name, "scope": b.scope, "region": b.region, "zone": b.zone,
                    "rack": b.rack, "host": b.host_name,
                    "resources": capacity.get(b.uuid, {})} for b in backends]
    fleet = _level("fleet")
    regions: dict[str, dict] = {}
    for host in rows:
        _count(fleet, host)
        region_level = regions.setdefault(host["region"], {**_level(host["region"]),
                                                           "zones": {}})
        _count(region_level, host)
        zone_level = region_level["zones"].setdefault(host["zone"], {**_level(host["zone"]),
                                                                     "racks": {}})
        _count(zone_level, host)
        rack_level = zone_level["racks"].setdefault(host["rack"], {**_level(host["rack"]),
                                                                   "hosts": []})
        _count(rack_level, host)
        rack_level["hosts"].append(host)
    depth = LEVELS.index(by)
    for region_level in regions.values():
        zones = list(region_level.pop("zones").values())
        for zone_level in zones:
            racks = list(zone_level.pop("racks").values())
            for rack_level in racks:
                if depth < 3:
                    rack_level.pop("hosts")
            if depth >= 2:
                zone_level["racks"] = racks
        if depth >= 1:
            region_level["zones"] = zones
    fleet.pop("name")
    fleet["regions"] = list(regions.values())
    fleet["backends"] = storage
    return fleet
