"""Durable state of the fake hypervisor: a SQLite file of its own.

Like a real hypervisor's guests, the simulated hosts' guests must outlive the
process that asked for them, so they live in a file (``[compute] state_path``)
and not in the fleetflow database: after ``kill -9`` a restarted process finds
them again. Several processes may open the same file (WAL, BEGIN IMMEDIATE and a
busy timeout, from :func:`fleetflow.persistence.db.create_engine`), so every
check-then-write below runs inside one write transaction.

Tables (their own MetaData: they are not fleetflow schema, alembic never sees them):

- ``guests``: one row per guest and host (an instance being evacuated may briefly
  exist on two hosts); ``state`` is BUILDING until the boot finished.
- ``spawns``: effective spawns per instance and host, kept after a destroy, so a
  test can prove an instance was booted at most once.
- ``fences``: the highest fencing token seen per key.
- ``evacuated``: copies a host must destroy when it comes back (it was fenced
  and its instances rebuilt elsewhere).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import sqlalchemy as sa

from fleetflow.common.exceptions import StaleFence
from fleetflow.compute.exceptions import CapacityExceeded
from fleetflow.persistence.db import create_engine

metadata = sa.MetaData()

guests = sa.Table(
    "guests", metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("uuid", sa.String(36), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("image", sa.String(255), nullable=True),
    sa.Column("resources", sa.JSON, nullable=False),
    sa.Column("volumes", sa.JSON, nullable=False),
    sa.Column("migrated_from", sa.String(255), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Index("ix_guests_uuid", "uuid"),
)

spawns = sa.Table(
    "spawns", metadata,
    sa.Column("uuid", sa.String(36), primary_key=True),
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("builds", sa.Integer, nullable=False, default=0),
    sa.Column("rebuilds", sa.Integer, nullable=False, default=0),
)

fences = sa.Table(
    "fences", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("token", sa.Integer, nullable=False),
)

evacuated = sa.Table(
    "evacuated", metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("uuid", sa.String(36), primary_key=True),
    sa.Column("recorded_at", sa.Float, nullable=False),
)


def open_engine(path: str) -> sa.Engine:
    """The state file's engine, with its tables created (safe from several processes)."""
    engine = create_engine(f"sqlite:///{os.path.abspath(path)}")
    # NOTE: create_all checks, then creates, inside one BEGIN IMMEDIATE
    # transaction (SQLite DDL is transactional), so two processes opening a
    # new file at once do not both try to create the tables.
    with engine.begin() as conn:
        metadata.create_all(conn)
    return engine


def guest_dict(row, spawn_count: int | None = None) -> dict:
    """A guest as the agent returns it (JSON-safe)."""
    guest = {
        "uuid": row.uuid, "host": row.host, "state": row.state, "image": row.image,
        "resources": dict(row.resources), "volumes": list(row.volumes),
        "migrated_from": row.migrated_from, "created_at": row.created_at,
    }
    if spawn_count is not None:
        guest["spawn_count"] = spawn_count
    return guest


def load_guest(conn, host: str, uuid: str) -> dict | None:
    row = conn.execute(
        sa.select(guests, sa.func.coalesce(spawns.c.builds, 0).label("builds"))
        .select_from(guests.outerjoin(
            spawns, sa.and_(spawns.c.uuid == guests.c.uuid, spawns.c.host == guests.c.host)))
        .where(guests.c.host == host, guests.c.uuid == uuid)).first()
    return guest_dict(row, row.builds) if row is not None else None


def load_guests(conn, host: str) -> list[dict]:
    rows = conn.execute(
        sa.select(guests, sa.func.coalesce(spawns.c.builds, 0).label("builds"))
        .select_from(guests.outerjoin(
            spawns, sa.and_(spawns.c.uuid == guests.c.uuid, spawns.c.host == guests.c.host)))
        .where(guests.c.host == host).order_by(guests.c.created_at, guests.c.uuid))
    return [guest_dict(row, row.builds) for row in rows]


def check_fence(conn, fence: Mapping | None) -> None:
    """Refuse a token older than the newest seen for its key; remember newer ones."""
    if not fence:
        return
    key, token = str(fence["key"]), int(fence["token"])
    current = conn.execute(sa.select(fences.c.token).where(fences.c.key == key)).scalar()
    if current is None:
        conn.execute(fences.insert().values(key=key, token=token))
    elif current > token:
        raise StaleFence(f"host refuses job {key}: token {token} is stale (current {current})",
                         key=key, current=current, token=token)
    elif token > current:
        conn.execute(fences.update().where(fences.c.key == key).values(token=token))


def count_spawn(conn, host: str, uuid: str, column: str) -> None:
    """Add one effective spawn (``builds`` or ``rebuilds``) to the ledger."""
    updated = conn.execute(
        spawns.update().where(spawns.c.uuid == uuid, spawns.c.host == host)
        .values({column: spawns.c[column] + 1})).rowcount
    if not updated:
        counts = {"builds": 0, "rebuilds": 0, column: 1}
        conn.execute(spawns.insert().values(uuid=uuid, host=host, **counts))


def apply_evacuations(conn, host: str) -> list[str]:
    """Destroy the copies of instances rebuilt elsewhere while ``host`` was fenced."""
    doomed = list(conn.execute(
        sa.select(evacuated.c.uuid).where(evacuated.c.host == host)).scalars())
    if doomed:
        conn.execute(guests.delete().where(guests.c.host == host, guests.c.uuid.in_(doomed)))
        conn.execute(evacuated.delete().where(evacuated.c.host == host))
    return doomed


def apply_all_evacuations(conn, hosts: set[str]) -> dict[str, list[str]]:
    """:func:`apply_evacuations` for many hosts in one transaction (agent start)."""
    doomed: dict[str, list[str]] = {}
    for host, uuid in conn.execute(sa.select(evacuated.c.host, evacuated.c.uuid)):
        if host in hosts:
            doomed.setdefault(host, []).append(uuid)
    for host, uuids in doomed.items():
        conn.execute(guests.delete().where(guests.c.host == host, guests.c.uuid.in_(uuids)))
        conn.execute(evacuated.delete().where(evacuated.c.host == host))
    return doomed


def record_evacuation(conn, host: str, uuid: str) -> None:
    exists = conn.execute(sa.select(evacuated.c.uuid).where(
        evacuated.c.host == host, evacuated.c.uuid == uuid)).first()
    if exists is None:
        conn.execute(evacuated.insert().values(host=host, uuid=uuid, recorded_at=time.time()))


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
    used: dict[str, int] = {}
    for res in conn.execute(sa.select(guests.c.resources).where(guests.c.host == host)).scalars():
        for rc, amount in res.items():
            used[rc] = used.get(rc, 0) + int(amount)
    return used


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
