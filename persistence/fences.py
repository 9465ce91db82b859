"""Fencing tokens: proof that a conductor still owns the job whose effects it writes.

Two conductors can briefly both believe they own a job (a claim that expired
while its owner was paused). Each time a conductor takes a job it calls
:func:`advance`, which bumps the job's token; every side effect carries the
token it was given (``{"key": job_id, "token": n}``) and is refused, inside the
same transaction as the write, when a newer token exists (:func:`check`).
Hosts keep the highest token they have seen per key and refuse older ones too.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm import Mapped, mapped_column

from fleetflow.common.exceptions import StaleFence
from fleetflow.persistence.db import Base


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Fence(Base):
    __tablename__ = "fences"

    key: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    token: Mapped[int] = mapped_column(sa.Integer, default=0)
    owner: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=_utcnow,
                                                    onupdate=_utcnow)


def advance(session: orm.Session, key: str, owner: str) -> dict:
    """Take the next token for ``key``; returns the fence to hand to side effects."""
    updated = session.execute(
        sa.update(Fence).where(Fence.key == key)
        .values(token=Fence.token + 1, owner=owner, updated_at=_utcnow())
        .returning(Fence.token)).scalar_one_or_none()
    if updated is None:
        try:
            with session.begin_nested():
                session.add(Fence(key=key, token=1, owner=owner))
            updated = 1
        except sa.exc.IntegrityError:
            # Another conductor created the row first: take the next one after it.
            return advance(session, key, owner)
    return {"key": key, "token": int(updated)}


def check(session: orm.Session, fence: dict | None) -> None:
    """Raise StaleFence unless ``fence`` is still the newest token of its key.

    ``None`` means "not fenced" (operator actions and tests); the caller's
    write must then be idempotent on its own.
    """
    if not fence:
        return
    current = session.execute(
        sa.select(Fence.token).where(Fence.key == fence["key"])).scalar_one_or_none()
    if current is not None and current > int(fence["token"]):
        raise StaleFence(f"job {fence['key']}: token {fence['token']} is stale "
                         f"(current {current})", key=fence["key"], current=current)


def current(connection, key: str) -> tuple[int | None, str | None]:
    """``(token, owner)`` of ``key`` as last advanced; ``(None, None)`` before any."""
    row = connection.execute(sa.select(Fence.token, Fence.owner)
                             .where(Fence.key == key)).first()
    return (None, None) if row is None else (int(row[0]), row[1])
