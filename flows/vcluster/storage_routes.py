"""Which host carries a storage backend's calls, and a volume delete that always ends.

A backend has no agent of its own: its calls go through a living host that
reaches it — the host itself for host-local storage, any host of the rack
for rack-shared storage (the first by name, so retries take the same route).
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.compute.exceptions import HostDead, VolumeInUse
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence.models import Host, StorageBackend

LOG = logging.getLogger(__name__)


class NoRoute(HostDead):
    """No living host reaches the backend: its volumes cannot be reached now."""

    code = "fleetflow.compute.backend_unreachable"


def routes(session, backend: str, conf) -> list[str]:
    """Living hosts reaching ``backend``, in the order calls should try them."""
    row = session.execute(sa.select(StorageBackend).where(
        StorageBackend.name == backend)).scalar_one_or_none()
    if row is None:
        return []
    query = sa.select(Host).order_by(Host.name)
    if row.scope == "host":
        query = query.where(Host.name == row.host_name)
    else:
        query = query.where(Host.region == row.region, Host.zone == row.zone,
                            Host.rack == row.rack)
    down_time = conf.compute.service_down_time
    return [h.name for h in session.scalars(query)
            if evac_rows.effective_host_state(h, down_time) == states.HOST_UP]


def first_routes(session, backends, conf) -> dict[str, str]:
    """``{backend: the first living host reaching it}`` for many backends, in two queries."""
    rows = list(session.scalars(sa.select(StorageBackend).where(
        StorageBackend.name.in_(set(backends))))) if backends else []
    if not rows:
        return {}
    racks = {(r.region, r.zone, r.rack) for r in rows}
    down_time = conf.compute.service_down_time
    living: dict[tuple, list[str]] = {}
    by_name: dict[str, bool] = {}
    hosts = session.execute(sa.select(Host.name, Host.region, Host.zone, Host.rack,
                                      Host.state, Host.heartbeat_at).where(
        sa.tuple_(Host.region, Host.zone, Host.rack).in_(list(racks))).order_by(Host.name))
    for host in hosts:
        up = evac_rows.effective_host_state(host, down_time) == states.HOST_UP
        by_name[host.name] = up
        if up:
            living.setdefault((host.region, host.zone, host.rack), []).append(host.name)
    found = {}
    for row in rows:
        if row.scope == "host":
            if by_name.get(row.host_name):
                found[row.name] = row.host_name
        elif living.get((row.region, row.zone, row.rack)):
            found[row.name] = living[(row.region, row.zone, row.rack)][0]
    return found


def route(session, backend: str, conf) -> str:
    found = routes(session, backend, conf)
    if not found:
        raise NoRoute(f"storage backend {backend}: no living host reaches it",
                      backend=backend)
    return found[0]


def delete_volume(rt, backend: str | None, volume_id: str, fence=None) -> bool:
    """Delete the volume from ``backend``; True when the backend confirmed it.

    An attachment left by a guest whose host died is forced off first. When
    no living host reaches the backend (a dead host's own disk), nothing can
    be done there now: False, and the caller records the volume as deleted
    (its allocation freed); its bytes stay on that disk until someone
    brings the host back and deletes them.
    """
    if not backend:
        return True
    with rt.database.session() as session:
        candidates = routes(session, backend, rt.conf)
    for host in candidates:
        try:
            try:
                rt.compute.ensure_volume_deleted(host, backend, volume_id, fence=fence)
            except VolumeInUse:
                rt.compute.ensure_force_detached(host, backend, volume_id, fence=fence)
                rt.compute.ensure_volume_deleted(host, backend, volume_id, fence=fence)
            return True
        except HostDead:
            LOG.info("volume %s: route %s to %s is dead; trying the next", volume_id, host,
                     backend)
    LOG.warning("volume %s: no living host reaches %s; recorded deleted", volume_id, backend)
    return False
