"""Tables of TaskFlow's logbooks, flow details and atom details (``tf_`` prefix).

Same information as TaskFlow's own SQLAlchemy schema (``logbooks``,
``flowdetails``, ``atomdetails``), declared on fleetflow's ``Base`` so they are
created by fleetflow's alembic history (branch ``engine``, revision 0003) and
checked against it like every other table. The backend uses only the Core
``Table`` objects (``LOGBOOKS`` ...), never the ORM session, so a checkpoint is
one pre-built statement.

``meta``, ``failure``, ``results``, ``revert_results`` and ``revert_failure``
hold JSON text that the backend encodes and decodes itself (not a column
type): it compares the encoded text with what is stored to skip rewriting
atom details that did not change.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from fleetflow.persistence.db import Base

UUID_LENGTH = 64
NAME_LENGTH = 255


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class LogbookRow(Base):
    __tablename__ = "tf_logbooks"

    uuid: Mapped[str] = mapped_column(sa.String(UUID_LENGTH), primary_key=True)
    name: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH), nullable=True)
    meta: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    created_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)
    updated_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)


class FlowDetailRow(Base):
    __tablename__ = "tf_flowdetails"

    uuid: Mapped[str] = mapped_column(sa.String(UUID_LENGTH), primary_key=True)
    # NOTE: nullable like TaskFlow's schema: a flow detail may be saved with
    # update_flow_details(..., ignore_missing=True) before any logbook holds it.
    parent_uuid: Mapped[str | None] = mapped_column(
        sa.String(UUID_LENGTH), sa.ForeignKey("tf_logbooks.uuid", ondelete="CASCADE"),
        nullable=True, index=True)
    name: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH), nullable=True)
    # Indexed (migration 0007): the reconciler looks up the unfinished flows
    # among every flow ever run (engine/reconcile.py).
    state: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH), nullable=True,
                                              index=True)
    meta: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow,
                                                    onupdate=utcnow)


class AtomDetailRow(Base):
    __tablename__ = "tf_atomdetails"

    uuid: Mapped[str] = mapped_column(sa.String(UUID_LENGTH), primary_key=True)
    parent_uuid: Mapped[str | None] = mapped_column(
        sa.String(UUID_LENGTH), sa.ForeignKey("tf_flowdetails.uuid", ondelete="CASCADE"),
        nullable=True, index=True)
    name: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH), nullable=True)
    # TASK_DETAIL or RETRY_DETAIL (taskflow.persistence.models.ATOM_TYPES).
    atom_type: Mapped[str] = mapped_column(sa.String(32))
    version: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    state: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH), nullable=True)
    intention: Mapped[str | None] = mapped_column(sa.String(32), nullable=True)
    meta: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    failure: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    results: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    revert_results: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    revert_failure: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow,
                                                    onupdate=utcnow)


# Atom columns written on update (not uuid or parent_uuid), and which of
# them hold JSON text.
ATOM_COLUMNS = ("name", "atom_type", "version", "state", "intention", "meta", "failure",
                "results", "revert_results", "revert_failure")
JSON_COLUMNS = frozenset({"meta", "failure", "results", "revert_results", "revert_failure"})

LOGBOOKS: sa.Table = LogbookRow.__table__
FLOWDETAILS: sa.Table = FlowDetailRow.__table__
ATOMDETAILS: sa.Table = AtomDetailRow.__table__
