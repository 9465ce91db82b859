"""The outbox of flows: an intent to run, written in the transaction of its rows.

An operation (a reservation, an evacuation, a vcluster change, a teardown)
writes its domain rows and a :class:`FlowIntent` in ONE transaction. Once
that commits the flow is owed: whoever materializes the intent (the
submitter right after the commit, or the conductors' reconciler later if
that failed or the process died) saves its logbook and flow detail, marks it
``materialized_at`` and posts its job. The jobboard is then only a cache of
which flows must run, re-derived from the database (engine/reconcile.py).

A commit hook runs work that must follow a commit (:func:`on_commit`), and
:func:`joining` lets a plain submit callable be handed a session all the same.

:class:`ReconcileLease` lets one reconciler per board do the work of a
period, however many conductor processes run.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import event, orm
from sqlalchemy.orm import Mapped, mapped_column

from fleetflow.common import crash_points
from fleetflow.persistence.db import Base

LOG = logging.getLogger(__name__)

_HOOKS = "fleetflow.after_commit"
_READY = "fleetflow.after_commit.ready"
_LISTENING = "fleetflow.after_commit.listening"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class FlowIntent(Base):
    __tablename__ = "flow_intents"

    # The operation id: logbook uuid = flow detail uuid = job name.
    flow_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    # The jobboard it goes to: boards may share a database, and each board's
    # reconciler looks after its own flows only.
    board: Mapped[str] = mapped_column(sa.String(64))
    flow_name: Mapped[str] = mapped_column(sa.String(255))
    # Where the factory is registered: a process that never built this flow
    # (a conductor's reconciler) imports it to build it.
    flow_module: Mapped[str] = mapped_column(sa.String(255))
    flow_kwargs: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    store: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    owner_tenant: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    on_error: Mapped[str] = mapped_column(sa.String(16))
    created_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow)
    # NULL until the logbook exists: the reconciler's look-up, hence the index.
    materialized_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True,
                                                                index=True)


class ReconcileLease(Base):
    __tablename__ = "reconcile_leases"

    board: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(sa.String(255))
    expires_at: Mapped[dt.datetime] = mapped_column(sa.DateTime)


def add(session: orm.Session, flow_id: str, board: str, flow_name: str, flow_module: str,
        flow_kwargs: dict, store: dict, owner_tenant: str | None, on_error: str) -> FlowIntent:
    """Record that ``flow_id`` must run (posted on ``board``), in the caller's transaction."""
    intent = FlowIntent(flow_id=flow_id, board=board, flow_name=flow_name,
                        flow_module=flow_module, flow_kwargs=flow_kwargs, store=store,
                        owner_tenant=owner_tenant, on_error=on_error, created_at=utcnow())
    session.add(intent)
    session.flush()
    _crash_after_commit(session, flow_name)
    return intent


def _crash_after_commit(session: orm.Session, flow_name: str) -> None:
    """The ``<flow name>:after-commit`` crash point, for crash tests.

    Registered as the intent is added, it is the first thing to follow the
    commit: the rows and the intent are durable, the flow's materialization
    (logbook saved, job posted) has not begun.
    """
    if crash_points.CRASH_ENV in os.environ:
        on_commit(session, functools.partial(crash_points.maybe_crash, flow_name,
                                             crash_points.AFTER_COMMIT))


def get(session: orm.Session, flow_id: str) -> FlowIntent | None:
    return session.get(FlowIntent, flow_id)


def pending(session: orm.Session, board: str, older_than: float,
            limit: int = 100) -> list[FlowIntent]:
    """``board``'s intents not materialized ``older_than`` seconds after their commit.

    Oldest first; younger ones are left to the submitter that is
    materializing them now.
    """
    cutoff = utcnow() - dt.timedelta(seconds=older_than)
    return list(session.scalars(
        sa.select(FlowIntent)
        .where(FlowIntent.materialized_at.is_(None), FlowIntent.created_at <= cutoff,
               FlowIntent.board == board)
        .order_by(FlowIntent.created_at).limit(limit)))


def mark_materialized(session: orm.Session, flow_id: str) -> None:
    session.execute(sa.update(FlowIntent).where(
        FlowIntent.flow_id == flow_id, FlowIntent.materialized_at.is_(None))
        .values(materialized_at=utcnow()))


def take_lease(session: orm.Session, board: str, owner: str, seconds: float) -> bool:
    """True when ``owner`` holds the reconcile lease of ``board`` for ``seconds`` more.

    One conditional UPDATE (or the first INSERT): of two processes racing for
    a lapsed lease, one wins.
    """
    now = utcnow()
    until = now + dt.timedelta(seconds=seconds)
    taken = session.execute(sa.update(ReconcileLease).where(
        ReconcileLease.board == board,
        sa.or_(ReconcileLease.owner == owner, ReconcileLease.expires_at <= now))
        .values(owner=owner, expires_at=until)).rowcount
    if taken:
        return True
    if session.get(ReconcileLease, board) is not None:
        return False
    try:
        with session.begin_nested():
            session.add(ReconcileLease(board=board, owner=owner, expires_at=until))
    except sa.exc.IntegrityError:
        return False
    return True


def release_lease(session: orm.Session, board: str, owner: str) -> None:
    """End ``owner``'s lease of ``board`` now, so another process may take it at once."""
    session.execute(sa.update(ReconcileLease).where(
        ReconcileLease.board == board, ReconcileLease.owner == owner)
        .values(expires_at=utcnow()))


# -- work that follows a commit ------------------------------------------------------


def on_commit(session: orm.Session, callback: Callable[[], object]) -> None:
    """Call ``callback()`` once ``session``'s transaction has committed; never on rollback.

    Callbacks run in registration order, on the committing thread, once the
    session has given its connection back to the pool: they may use other
    sessions (a callback that needed a second connection while holding the
    first would exhaust the pool under concurrent requests), never this one.
    """
    if not session.info.get(_LISTENING):
        # Listeners stay for the session's life (SQLAlchemy cannot remove one
        # while it runs); between transactions they find no hooks.
        session.info[_LISTENING] = True
        event.listen(session, "after_commit", _committed)
        event.listen(session, "after_transaction_end", _ended)
    session.info.setdefault(_HOOKS, []).append(callback)


def _committed(session: orm.Session) -> None:
    # NOTE: SQLAlchemy signals a SAVEPOINT's release as a commit too; only
    # the outermost commit makes the rows (and the intents) durable.
    if not session.in_nested_transaction():
        session.info[_READY] = session.info.pop(_HOOKS, [])


def _ended(session: orm.Session, transaction) -> None:
    if transaction.parent is not None:
        return  # a SAVEPOINT: the outer transaction decides
    session.info.pop(_HOOKS, None)  # not committed: rolled back
    hooks = session.info.pop(_READY, None) or []
    first_error = None
    for callback in hooks:
        try:
            callback()
        except Exception as exc:  # the others still follow the commit
            first_error = first_error or exc
    if first_error is not None:
        raise first_error


def joining(submit: Callable[..., str]) -> Callable[..., str]:
    """``submit`` as operations call it: inside their transaction, with ``session=``.

    fleetflow's Submitter writes the intent in that transaction itself (it
    says so with ``joins_transaction``). Any other callable is called as
    before, once the rows are committed, without the session.
    """
    if getattr(submit, "joins_transaction", False):
        return submit

    @functools.wraps(submit)
    def call(*args, session: orm.Session | None = None, **kwargs):
        if session is None:
            return submit(*args, **kwargs)
        on_commit(session, functools.partial(submit, *args, **kwargs))
        return kwargs.get("flow_id")

    return call
