"""What a compute agent reads and writes before it serves its hosts, and when one
comes back: their inventories and storage, the routes clients follow to it, which
shard of the fleet is its own, and the copies of servers rebuilt elsewhere that a
host coming back must destroy (the database says which: it is the record, not the
host).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from fleetflow.common.exceptions import InvalidInput
from fleetflow.compute.drivers.fake import FakeDriver
from fleetflow.persistence import evacuations
from fleetflow.persistence.models import Host, StorageBackend

LOG = logging.getLogger(__name__)

# Hosts per UPDATE when writing routes (keeps SQLite's variable limit far away).
ROUTE_CHUNK = 500


def destroy_evacuated_copies(database, driver: FakeDriver, host: str) -> list[str]:
    """Destroy ``host``'s copies of the servers rebuilt elsewhere, or deleted, while
    it was dead (the database says which: it is the record, not the host)."""
    with database.session() as session:
        doomed = evacuations.stale_copies(session, host)
    destroyed = driver.destroy_copies(host, doomed) if doomed else []
    if destroyed:
        LOG.warning("host %s is back: destroyed %d guests rebuilt elsewhere or deleted "
                    "meanwhile: %s", host, len(destroyed), ", ".join(destroyed[:10]))
    return destroyed


def destroy_all_evacuated_copies(database, driver: FakeDriver) -> dict[str, list[str]]:
    """:func:`destroy_evacuated_copies` for every living host the driver serves (agent start)."""
    alive = set(driver.hosts) - driver.dead_hosts()
    with database.session() as session:
        # Asked first which hosts may have anything to destroy at all: one
        # query, rather than one per host for a fleet agent serving thousands.
        sources = evacuations.hosts_with_stale_copies(session)
    return {host: destroy_evacuated_copies(database, driver, host)
            for host in sorted(alive & sources)}


def load_inventories(database, hosts: Iterable[str] | None = None) -> dict[str, Mapping]:
    """Inventories of the named hosts (every host when None) from the database."""
    wanted = None if hosts is None else list(dict.fromkeys(hosts))
    query = sa.select(Host.name, Host.inventory)
    with database.session() as session:
        rows = session.execute(query).all()
    inventories = {name: inv or {} for name, inv in rows}
    if wanted is None:
        return inventories
    missing = [h for h in wanted if h not in inventories]
    if missing:
        raise InvalidInput(f"unknown hosts: {', '.join(missing[:10])}", hosts=missing[:10])
    return {h: inventories[h] for h in wanted}


def load_storage(database, hosts: Iterable[str]) -> tuple[dict[str, dict], dict[str, dict]]:
    """(topology of ``hosts``, the storage backends they reach) from the database."""
    hosts = set(hosts)
    with database.session() as session:
        placed = session.execute(sa.select(Host.name, Host.region, Host.zone, Host.rack)).all()
        backends = session.scalars(sa.select(StorageBackend)).all()
        topology = {name: {"region": region, "zone": zone, "rack": rack}
                    for name, region, zone, rack in placed if name in hosts}
        racks = {(t["region"], t["zone"], t["rack"]) for t in topology.values()}
        reached = {
            b.name: {"scope": b.scope, "host_name": b.host_name, "region": b.region,
                     "zone": b.zone, "rack": b.rack, "capacity_gb": b.capacity_gb,
                     "volume_types": list(b.volume_types or [])}
            for b in backends
            if (b.host_name in hosts if b.scope == "host"
                else (b.region, b.zone, b.rack) in racks)}
    return topology, reached


def write_routes(database, hosts: list[str], server_name: str | None) -> None:
    """Point ``hosts.compute_agent`` of ``hosts`` at ``server_name`` (None: own name).

    Only the rows routed elsewhere are locked and written: an agent started
    again with the routes it had (every conductor of an embedded cloud, each
    serving the whole fleet under the machine's name) takes no write lock on
    the fleet's host rows.
    """
    hosts = sorted(set(hosts))
    with database.read_session() as session:
        elsewhere = [name for start in range(0, len(hosts), ROUTE_CHUNK)
                     for name in session.scalars(sa.select(Host.name).where(
                         Host.name.in_(hosts[start:start + ROUTE_CHUNK]),
                         Host.compute_agent.is_distinct_from(server_name)))]
    if not elsewhere:
        return
    with database.session() as session:
        for start in range(0, len(elsewhere), ROUTE_CHUNK):
            chunk = evacuations.lock_hosts(session, elsewhere[start:start + ROUTE_CHUNK])
            session.execute(sa.update(Host).where(Host.name.in_(chunk))
                            .values(compute_agent=server_name))


def in_shard(host: str, shard: tuple[int, int]) -> bool:
    """Whether ``host`` belongs to shard ``index`` of ``count`` (stable across runs)."""
    index, count = shard
    return zlib.crc32(host.encode()) % count == index
