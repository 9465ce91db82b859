"""The fleet's snapshot kept between two admission passes: only hosts that changed are
read again.

A pass needs the whole fleet each time, and reading every host row
(capabilities, traits, inventory as JSON) and every provider's usage was most
of a pass's cost at a thousand hosts. Every placement write moves its
providers' generations (docs/architecture.md), and a host's state, labels or
inventory changing moves its row's ``updated_at``: a host whose pair did not
move since the last pass has the same usage and the same labels. Its state
and evacuation, plain columns, are read every time with that pair.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import sqlalchemy as sa

from fleetflow.persistence.models import Host
from fleetflow.persistence.placement import allocations
from fleetflow.persistence.placement.models import ResourceProvider
from fleetflow.scheduler.snapshot import CloudSnapshot, HostState, capacity_of

_CHUNK = 500  # uuids per IN (...)


class SnapshotCache:
    """Host states by uuid with the (updated_at, generation) they were read at."""

    def __init__(self):
        self._hosts: dict[str, tuple[tuple, HostState]] = {}
        self.reads = 0  # hosts read again over the cache's life

    def snapshot(self, session, failures: Mapping[str, int]) -> CloudSnapshot:
        """What ``snapshot_from_db(session, usage, failures)`` answers, from fewer reads."""
        rows = session.execute(
            sa.select(Host.uuid, Host.updated_at, ResourceProvider.generation, Host.state,
                      Host.evacuation_id)
            .join(ResourceProvider, ResourceProvider.uuid == Host.uuid)).all()
        keys = {r.uuid: (r.updated_at, r.generation) for r in rows}
        stale = [u for u, key in keys.items() if self._hosts.get(u, ((),))[0] != key]
        for i in range(0, len(stale), _CHUNK):
            chunk = stale[i:i + _CHUNK]
            used = allocations.usages_by_provider(session, chunk)
            for host in session.scalars(sa.select(Host).where(Host.uuid.in_(chunk))):
                self._hosts[host.uuid] = (keys[host.uuid], _base(host, used.get(host.uuid)))
        self.reads += len(stale)
        if len(self._hosts) > len(keys):  # hosts gone
            self._hosts = {u: v for u, v in self._hosts.items() if u in keys}
        hosts = []
        for r in rows:
            host = copy.copy(self._hosts[r.uuid][1])
            host.state, host.held_by = r.state, r.evacuation_id
            host.used = dict(host.used)  # a pass adds to it
            host.recent_failures = failures.get(host.name, 0)
            hosts.append(host)
        return CloudSnapshot(hosts)


def _base(row: Host, used: Mapping[str, int] | None) -> HostState:
    return HostState(
        name=row.name, uuid=row.uuid, state=row.state, region=row.region, zone=row.zone,
        rack=row.rack, capabilities=dict(row.capabilities or {}),
        traits=frozenset(row.traits or ()),
        capacity={rc: capacity_of(rec) for rc, rec in (row.inventory or {}).items()},
        used=dict(used or {}))
