"""The rows of automatic host recovery: one per detection, and the cluster-wide switch.

A ``recoveries`` row is the monitor's memory of one host it found silent:
each decision (suspect, confirmed dead, held by the storm guard, fenced, the
evacuation it started, the outcome) is a status change and a timeline entry
written before the action it allows, so a monitor that took over after a
crash goes on from the rows (services/recovery/). ``open_host`` is the host's
name while the recovery is unfinished and NULL afterwards: a unique column,
so a host never has two open recoveries, whichever monitor writes.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm import Mapped, mapped_column

from fleetflow.persistence.db import Base
from fleetflow.persistence.models import Host, utcnow

RECOVERY_PREFIX = "rc-"

# Statuses of an open recovery, in the order they are reached.
SUSPECT = "SUSPECT"      # heartbeat older than service_down_time; pinged
DEAD = "DEAD"            # silent for confirm_seconds as well
HELD = "HELD"            # dead, but the storm guard holds every action
FENCED = "FENCED"        # host down (reason automatic); its evacuation id chosen
EVACUATING = "EVACUATING"
OPEN = (SUSPECT, DEAD, HELD, FENCED, EVACUATING)
# Statuses of a closed one.
FLAPPED = "FLAPPED"      # answered again before confirm_seconds
CLEARED = "CLEARED"      # an operator changed the host's state first
ABORTED = "ABORTED"      # fenced, but its evacuation was refused (the host answers)
# ... and the evacuation's own end: DONE, PARTIAL, FAILED, REVERTED.

# The lease key (persistence.intents.take_lease) and the fencing key
# (persistence.fences) of the monitor.
LEASE_KEY = "recovery-monitor"


class Recovery(Base):
    __tablename__ = "recoveries"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    host: Mapped[str] = mapped_column(sa.String(255), index=True)
    zone: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    status: Mapped[str] = mapped_column(sa.String(16), index=True)
    # The host while the recovery is open (unique), NULL once it is closed.
    open_host: Mapped[str | None] = mapped_column(sa.String(255), nullable=True, unique=True)
    suspect_at: Mapped[dt.datetime] = mapped_column(sa.DateTime)
    # First failed ping since it became suspect: confirm_seconds count from it.
    silent_since: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)
    dead_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)
    fenced_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)
    # Chosen with the fence, before the evacuation is created: whoever creates
    # it after a crash creates this one, never a second.
    evacuation_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True,
                                                      index=True)
    # [{"event", "at", "detail"}], oldest first.
    timeline: Mapped[list] = mapped_column(sa.JSON, default=list)
    detail: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow,
                                                    onupdate=utcnow)


class RecoveryControl(Base):
    """The one row of the operators' switch: automatic action paused or not."""

    __tablename__ = "recovery_control"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    paused: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    reason: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    user_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow,
                                                    onupdate=utcnow)


class RecoveryProject(Base):
    """An administrator's override of ``[recovery] servers`` for one project."""

    __tablename__ = "recovery_projects"

    project_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    # all | ha | none (PROJECT_SERVERS)
    servers: Mapped[str] = mapped_column(sa.String(8))
    reason: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    user_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow,
                                                    onupdate=utcnow)


# Which servers of a project a recovery moves: every one, those marked
# ha=true, or none at all.
PROJECT_SERVERS = ("all", "ha", "none")


def project_overrides(session: orm.Session, projects) -> dict[str, str]:
    """``{project: servers}`` of the projects among ``projects`` with an override."""
    projects = sorted(set(projects))
    if not projects:
        return {}
    return dict(session.execute(sa.select(RecoveryProject.project_id, RecoveryProject.servers)
                                .where(RecoveryProject.project_id.in_(projects))).all())


def set_project(session: orm.Session, project_id: str, servers: str, reason: str | None,
                user_id: str | None) -> RecoveryProject:
    """Create or change the project's override (a repeat changes nothing more)."""
    row = session.get(RecoveryProject, project_id)
    if row is None:
        try:
            with session.begin_nested():
                row = RecoveryProject(project_id=project_id, servers=servers)
                session.add(row)
        except sa.exc.IntegrityError:  # set by another request meanwhile: this one wins
            row = session.get(RecoveryProject, project_id)
    row.servers, row.reason, row.user_id = servers, reason, user_id
    row.updated_at = utcnow()
    return row


def project_view(row: RecoveryProject) -> dict:
    return {"project_id": row.project_id, "servers": row.servers, "reason": row.reason,
            "user_id": row.user_id, "updated_at": row.updated_at}


def new_id() -> str:
    return RECOVERY_PREFIX + uuidlib.uuid4().hex[:12]


def event(recovery: Recovery, name: str, detail: str | None = None,
          at: dt.datetime | None = None) -> None:
    """Append one timeline entry (a new list: JSON columns track assignment only)."""
    entry = {"event": name, "at": (at or utcnow()).isoformat(timespec="milliseconds")}
    if detail:
        entry["detail"] = detail
    recovery.timeline = [*(recovery.timeline or []), entry]


def close(recovery: Recovery, status: str, detail: str | None = None) -> None:
    recovery.status, recovery.open_host = status, None
    recovery.finished_at = utcnow()
    if detail:
        recovery.detail = detail[:255]
    event(recovery, status.lower(), detail)


def stale_hosts(session: orm.Session, service_down_time: float,
                now: dt.datetime) -> list[Host]:
    """Hosts set ``up`` whose agent has been silent for ``service_down_time``, unheld."""
    cutoff = now - dt.timedelta(seconds=service_down_time)
    return list(session.scalars(sa.select(Host).where(
        Host.state == "up", Host.heartbeat_at.is_not(None), Host.heartbeat_at < cutoff,
        Host.evacuation_id.is_(None)).order_by(Host.name)))


def open_suspects(session: orm.Session, hosts: list[Host], now: dt.datetime) -> list[str]:
    """A SUSPECT recovery for each of ``hosts`` without an open one; their names.

    Each insert is its own savepoint: a host another monitor opened meanwhile
    is skipped by the unique ``open_host``.
    """
    have = set(session.scalars(sa.select(Recovery.open_host).where(
        Recovery.open_host.in_([h.name for h in hosts]))))
    opened = []
    for host in hosts:
        if host.name in have:
            continue
        row = Recovery(id=new_id(), host=host.name, zone=host.zone, status=SUSPECT,
                       open_host=host.name, suspect_at=now, timeline=[])
        event(row, "suspect", f"last heartbeat {host.heartbeat_at.isoformat()}", now)
        try:
            with session.begin_nested():
                session.add(row)
        except sa.exc.IntegrityError:
            continue
        opened.append(host.name)
    return opened


def open_recoveries(session: orm.Session, statuses=OPEN, lock: bool = False) -> list[Recovery]:
    query = sa.select(Recovery).where(Recovery.status.in_(tuple(statuses))).order_by(
        Recovery.suspect_at, Recovery.host)
    if lock:
        query = query.with_for_update()
    return list(session.scalars(query))


def get(session: orm.Session, recovery_id: str) -> Recovery | None:
    return session.get(Recovery, recovery_id)


def control(session: orm.Session) -> RecoveryControl:
    """The switch's row, created (not paused) the first time it is read."""
    row = session.get(RecoveryControl, 1)
    if row is None:
        try:
            with session.begin_nested():
                row = RecoveryControl(id=1, paused=False)
                session.add(row)
        except sa.exc.IntegrityError:
            row = session.get(RecoveryControl, 1)
    return row


def paused(session: orm.Session) -> bool:
    row = session.get(RecoveryControl, 1)
    return bool(row and row.paused)


def view(recovery: Recovery, with_timeline: bool = True) -> dict:
    shown = {"id": recovery.id, "host": recovery.host, "zone": recovery.zone,
             "status": recovery.status, "evacuation_id": recovery.evacuation_id,
             "detail": recovery.detail, "suspect_at": recovery.suspect_at,
             "dead_at": recovery.dead_at, "fenced_at": recovery.fenced_at,
             "finished_at": recovery.finished_at, "created_at": recovery.created_at,
             "updated_at": recovery.updated_at}
    if with_timeline:
        shown["timeline"] = list(recovery.timeline or [])
    return shown
