"""The queue of requests waiting for capacity: one row per queued request.

A queued reservation (or vcluster) keeps its own row in its own status
(``QUEUED``); the row here says where it stands in the queue. Order is
priority (higher first), then arrival (``seq``, an autoincrement: two requests
of equal priority are never reordered, whatever their timestamps). A row
stays once its request is admitted (``admitted_at``) until its flow has
claimed, so an admission pass counts what was admitted but not claimed yet.
Admission itself is a conditional UPDATE of the request's own row
(``QUEUED`` -> ``PENDING``): of two admitters, one wins.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm import Mapped, mapped_column

from fleetflow.persistence.db import Base
from fleetflow.persistence.models import utcnow

KIND_RESERVATION = "reservation"
KIND_VCLUSTER = "vcluster"


class QueueEntry(Base):
    __tablename__ = "queue_entries"
    __table_args__ = (
        sa.UniqueConstraint("kind", "ref_id"),
        # The head of the queue: waiting rows by priority, then arrival.
        sa.Index("ix_queue_entries_order", "admitted_at", "priority", "seq"),
        # Waiting rows out of patience, wherever they stand.
        sa.Index("ix_queue_entries_deadline", "admitted_at", "deadline"),
    )

    seq: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(sa.String(16))
    ref_id: Mapped[str] = mapped_column(sa.String(36))
    tenant_id: Mapped[str] = mapped_column(sa.String(64), index=True)
    priority: Mapped[int] = mapped_column(sa.Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow)
    # When it runs out of patience (None: never).
    deadline: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)
    last_attempt: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)
    # Why the last pass could not admit it (the dry run's explanation, or the quota).
    why: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    # Requests behind it admitted before it (backfill): the starvation bound counts them.
    bypassed: Mapped[int] = mapped_column(sa.Integer, default=0)
    admitted_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)


_WAITING = QueueEntry.admitted_at.is_(None)
_ORDER = (QueueEntry.priority.desc(), QueueEntry.seq)


def add(session: orm.Session, kind: str, ref_id: str, tenant_id: str, priority: int,
        timeout: float | None) -> QueueEntry:
    now = utcnow()
    entry = QueueEntry(kind=kind, ref_id=ref_id, tenant_id=tenant_id, priority=priority,
                       created_at=now, bypassed=0,
                       deadline=now + dt.timedelta(seconds=timeout) if timeout else None)
    session.add(entry)
    session.flush()
    return entry


def _table(kind: str) -> sa.Table:
    from fleetflow.persistence.models import Reservation, VCluster

    return (Reservation if kind == KIND_RESERVATION else VCluster).__table__


def move_status(session: orm.Session, kind: str, ref_id: str, from_status: str,
                to_status: str, fault: dict | None = None) -> bool:
    """The request's own row ``from_status`` -> ``to_status`` if it still reads ``from_status``.

    One conditional UPDATE: of two writers (two admitters, an admitter and a
    DELETE), exactly one sees True.
    """
    table = _table(kind)
    values: dict = {"status": to_status, "updated_at": utcnow()}
    if fault is not None:
        values["fault"] = fault
    return session.execute(table.update().where(
        table.c.id == ref_id, table.c.status == from_status).values(**values)).rowcount == 1


def find(session: orm.Session, kind: str, ref_id: str) -> QueueEntry | None:
    return session.execute(sa.select(QueueEntry).where(
        QueueEntry.kind == kind, QueueEntry.ref_id == ref_id)).scalar_one_or_none()


def head(session: orm.Session, limit: int) -> list[QueueEntry]:
    """The first ``limit`` waiting entries, in queue order.

    One priority at a time, highest first: each is a range scan of the order
    index in its order (priority descending then seq ascending is no order
    one index gives), so the cost follows ``limit`` and the priorities in the
    head, not the queue's length.
    """
    found: list[QueueEntry] = []
    below = None
    while len(found) < limit:
        level = session.execute(sa.select(sa.func.max(QueueEntry.priority)).where(
            _WAITING, *(() if below is None else (QueueEntry.priority < below,)))
        ).scalar_one()
        if level is None:
            break
        found += session.scalars(sa.select(QueueEntry).where(
            _WAITING, QueueEntry.priority == level).order_by(QueueEntry.seq)
            .limit(limit - len(found)))
        below = level
    return found


def page(session: orm.Session, limit: int, after: int = 0) -> list[QueueEntry]:
    """Waiting entries in queue order, skipping the first ``after``."""
    return list(session.scalars(sa.select(QueueEntry).where(_WAITING)
                                .order_by(*_ORDER).offset(after).limit(limit)))


def waiting_count(session: orm.Session) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(QueueEntry)
                           .where(_WAITING)).scalar_one()


def expired(session: orm.Session, now: dt.datetime, limit: int) -> list[QueueEntry]:
    """Waiting entries whose deadline has passed, wherever they are in the queue."""
    return list(session.scalars(sa.select(QueueEntry).where(
        _WAITING, QueueEntry.deadline <= now).order_by(QueueEntry.seq).limit(limit)))


def ahead_of(session: orm.Session, entry: QueueEntry) -> int:
    """How many waiting entries come before ``entry`` in queue order."""
    return session.execute(sa.select(sa.func.count()).select_from(QueueEntry).where(
        _WAITING, sa.or_(QueueEntry.priority > entry.priority,
                         sa.and_(QueueEntry.priority == entry.priority,
                                 QueueEntry.seq < entry.seq)))).scalar_one()


def admitted(session: orm.Session, kind: str) -> list[QueueEntry]:
    """Entries of ``kind`` admitted whose flow may not have claimed yet."""
    return list(session.scalars(sa.select(QueueEntry).where(
        QueueEntry.kind == kind, QueueEntry.admitted_at.is_not(None)).order_by(QueueEntry.seq)))


def mark_admitted(session: orm.Session, seq: int) -> None:
    session.execute(sa.update(QueueEntry).where(QueueEntry.seq == seq)
                    .values(admitted_at=utcnow(), why=None))


def note_attempts(session: orm.Session, whys: dict[int, str]) -> None:
    """The last pass's answer for each entry it could not admit, by seq."""
    if not whys:
        return
    table = QueueEntry.__table__
    session.execute(table.update().where(table.c.seq == sa.bindparam("b_seq"))
                    .values(why=sa.bindparam("b_why"), last_attempt=utcnow()),
                    [{"b_seq": seq, "b_why": why} for seq, why in whys.items()])


def note_bypassed(session: orm.Session, seqs: list[int]) -> None:
    if seqs:
        session.execute(sa.update(QueueEntry).where(QueueEntry.seq.in_(seqs))
                        .values(bypassed=QueueEntry.bypassed + 1))


def remove(session: orm.Session, kind: str, ref_ids: list[str]) -> None:
    if ref_ids:
        session.execute(sa.delete(QueueEntry).where(QueueEntry.kind == kind,
                                                    QueueEntry.ref_id.in_(ref_ids)))


@dataclasses.dataclass(frozen=True)
class Stamp:
    """What an admitter compares between two looks (one query)."""

    used: int  # every allocation's amount, summed: falls when capacity is freed
    generations: int  # every provider's generation, summed: moves on any placement write
    providers: int
    hosts_changed: dt.datetime | None  # a host's state or inventory changed
    last_seq: int | None  # a request queued
    waiting: int

    def frees_capacity_since(self, before: Stamp | None) -> bool:
        """Whether an admission pass may find more than at ``before``.

        A claim moves generations and raises ``used``: no reason for a pass.
        """
        if before is None:
            return True
        if self.used < before.used or self.last_seq != before.last_seq:
            return True
        if (self.providers, self.hosts_changed) != (before.providers, before.hosts_changed):
            return True
        # Inventory changed with no allocation moving (a provider's total grew).
        return self.generations != before.generations and self.used == before.used


def stamp(session: orm.Session) -> Stamp:
    """The :class:`Stamp` now.

    Every placement write moves its providers' generations (docs/architecture.md,
    "A placement write moves its providers' stamps"); a host changing state or
    inventory moves its ``updated_at``; a new entry moves the largest seq.
    """
    from fleetflow.persistence.models import Host
    from fleetflow.persistence.placement.models import Allocation, ResourceProvider

    row = session.execute(sa.select(
        sa.select(sa.func.coalesce(sa.func.sum(Allocation.used), 0)).scalar_subquery(),
        sa.select(sa.func.coalesce(sa.func.sum(ResourceProvider.generation), 0),
                  ).scalar_subquery(),
        sa.select(sa.func.count(ResourceProvider.uuid)).scalar_subquery(),
        sa.select(sa.func.max(Host.updated_at)).scalar_subquery(),
        sa.select(sa.func.max(QueueEntry.seq)).scalar_subquery(),
        sa.select(sa.func.count(QueueEntry.seq)).where(_WAITING).scalar_subquery())).one()
    return Stamp(int(row[0]), int(row[1]), row[2], row[3], row[4], row[5])
