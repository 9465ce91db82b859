"""What the move tasks read and write besides their side effects: faults, volumes,
the co-moving members of a group, whether the evacuation is stopping."""

from __future__ import annotations

import time

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import reservations as reservation_rows
from fleetflow.persistence.evacuations import (
    GROUP_POLICY,
    MIGRATION_FAILED,
    NO_VALID_HOST,
)
from fleetflow.persistence.models import (
    Evacuation,
    GroupMember,
    Host,
    Move,
    StorageBackend,
)


def fault_code(exc: Exception) -> str:
    """A stable code for ``exc``: its own when it has one of ours, else by its kind."""
    from fleetflow.compute.exceptions import ComputeError
    from fleetflow.flows.tasks.claim import ClaimRace
    from fleetflow.persistence.placement.errors import PlacementConflict

    code = getattr(exc, "code", None)
    if isinstance(code, str) and code.isupper() and "." not in code:
        if isinstance(exc, ClaimRace) and "group" in str(exc):
            return GROUP_POLICY
        return NO_VALID_HOST if code == "CLAIM_CONFLICT" else code
    if isinstance(exc, PlacementConflict):
        return NO_VALID_HOST
    if isinstance(exc, ComputeError):
        return MIGRATION_FAILED
    return MIGRATION_FAILED


def fault_of(exc: Exception, step: str, host: str | None) -> dict:
    return reservation_rows.fault(fault_code(exc), getattr(exc, "message", None) or str(exc),
                                  step=step, host=host)


# How long a read of an evacuation's ``stopping`` serves the moves that ask:
# every server's retry asks before its move starts, a thousand reads for a
# thousand servers, while the answer changes once at most (and in this process:
# the retry that sets it also sets it here).
STOPPING_TTL = 0.1
_stopping_seen: dict[tuple[int, str], tuple[str | None, float]] = {}


def stopping(database, evacuation_id: str) -> str | None:
    """``pause`` or ``revert`` once a server ran out of hosts under that on_error."""
    key = (id(database), evacuation_id)
    seen = _stopping_seen.get(key)
    now = time.monotonic()
    if seen is not None and now - seen[1] < STOPPING_TTL:
        return seen[0]
    # A read: taking SQLite's write lock for it queued each move behind the others' writes.
    with database.reading() as conn:
        value = conn.execute(sa.select(Evacuation.stopping).where(
            Evacuation.id == evacuation_id)).scalar()
    if len(_stopping_seen) > 1024:
        _stopping_seen.clear()
    _stopping_seen[key] = (value, now)
    return value


def stopped(database, evacuation_id: str, value: str | None) -> None:
    """This process just wrote ``stopping``: its own moves see it at once."""
    _stopping_seen[(id(database), evacuation_id)] = (value, time.monotonic())


def unlanded_members(session, evacuation_id: str, group_id: str) -> list[str]:
    """Members of ``group_id`` this evacuation moves that have not joined a destination.

    Their group rows still name the host they are leaving; judging a
    destination against that host would refuse an affinity group moving
    together, so the claim leaves them out. A member that claimed a
    destination counts there (its claim moved its row, under the group lock).
    """
    return list(session.scalars(
        sa.select(Move.instance_id).join(GroupMember, GroupMember.instance_id == Move.instance_id)
        .where(Move.evacuation_id == evacuation_id, GroupMember.group_id == group_id,
               Move.status != states.DONE, GroupMember.host == Move.source)))


def reaches(backend: StorageBackend, host: Host) -> bool:
    if backend.scope == "host":
        return backend.host_name == host.name
    return (backend.region, backend.zone, backend.rack) == (host.region, host.zone, host.rack)


def volumes_for(session, uuid: str, destination: str) -> tuple[list[str], list[str]]:
    """(volumes the destination reaches, volumes lost with a source's own disk).

    A volume on another host's local disk cannot follow its server: lost.
    """
    attached = evac_rows.attached_volumes(session, uuid)
    if not attached:
        return [], []
    host = session.execute(sa.select(Host).where(Host.name == destination)).scalar_one()
    reachable, lost = [], []
    for volume, backend in attached:
        if backend is not None and reaches(backend, host):
            reachable.append(volume.id)
        elif backend is not None and backend.scope == "host":
            lost.append(volume.id)
    return reachable, lost
