"""The ``jobs`` table: the embedded jobboard's postings and claims.

One row per posted job. A job is *claimed* while ``owner`` is set and
``claim_expires_at`` lies in the future; an owner that dies simply stops
extending its claim, and the job becomes claimable again once it expires.
Consumed and trashed jobs keep their row (``state`` COMPLETE / TRASHED) as a
record of who ran what; only ``POSTED`` rows are on the board.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from fleetflow.persistence.db import Base

# Row states. TaskFlow's own job states (UNCLAIMED / CLAIMED / COMPLETE) are
# derived from these plus the claim columns, see engine/jobboard/sql.py.
JOB_POSTED = "POSTED"
JOB_COMPLETE = "COMPLETE"
JOB_TRASHED = "TRASHED"
JOB_STATES = (JOB_POSTED, JOB_COMPLETE, JOB_TRASHED)


def utcnow() -> dt.datetime:
    """Naive UTC now, as every DateTime column of fleetflow stores it."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # The board's listing query: POSTED jobs of one board in posting order.
        sa.Index("ix_jobs_board_state_sequence", "board", "state", "sequence"),
    )

    uuid: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    # Several boards (tests, or separate clouds) can share one database.
    board: Mapped[str] = mapped_column(sa.String(64))
    # The job name is the operation id (flow detail uuid); not unique, since an
    # operator's resume re-posts a job for the same flow.
    name: Mapped[str] = mapped_column(sa.String(255), index=True)
    # Posting order inside a board (TaskFlow boards list oldest first).
    sequence: Mapped[int] = mapped_column(sa.BigInteger)
    priority: Mapped[str] = mapped_column(sa.String(16), default="NORMAL")
    details: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    book_uuid: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)
    book_name: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    state: Mapped[str] = mapped_column(sa.String(16), default=JOB_POSTED)
    owner: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    claim_expires_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow)
