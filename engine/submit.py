"""Submitting an operation: logbook + flow detail + job, all under one id.

The operation id is the logbook uuid, the flow detail uuid and the job name,
so the API, the jobboard and TaskFlow's persistence all speak of one id::

    flow_id = submit(board, backend, "provision", {"reservation_id": "r-1", "count": 3},
                     owner_tenant="t1", on_error="revert")
    load_status(backend, flow_id)["state"]      # PENDING, RUNNING, SUCCESS ...

Submitting never runs anything: a conductor claims the job and runs it.

Operations submit through :class:`Submitter` inside their own transaction
(``session=``): the flow's intent (persistence/intents.py) commits with the
domain rows, so a committed operation always has a flow that will run. Once
the transaction commits the intent is *materialized* (logbook and flow
detail saved, then its job posted); if that fails — the jobboard is down,
the process dies — the conductors' reconciler (engine/reconcile.py) does it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow.engines import helpers as tf_helpers
from taskflow.persistence import models as tf_models

from fleetflow.common import ids
from fleetflow.common.exceptions import InvalidInput, NotFound
from fleetflow.engine import flow_views
from fleetflow.engine.conductor.worker import wake_local_conductors
from fleetflow.flows import keys, registry
from fleetflow.persistence import intents
from fleetflow.plugin import flow_meta
from fleetflow.plugin.flow_meta import META_KEY, ON_ERROR_CHOICES, ON_ERROR_REVERT

LOG = logging.getLogger(__name__)


def _prepare(flow_name: str, flow_kwargs: dict | None, store: dict | None,
             owner_tenant: str | None, on_error: str, flow_id: str | None):
    """Check the request and build its flow: ``(flow_id, flow_kwargs, store, flow)``.

    Raises InvalidInput before anything is written.
    """
    flow_kwargs = dict(flow_kwargs or {})
    store = dict(store or {})
    if on_error not in ON_ERROR_CHOICES:
        raise InvalidInput(f"on_error must be one of {', '.join(ON_ERROR_CHOICES)}",
                           field="on_error")
    registry.check_json_safe(store)
    flow_id = flow_id or ids.new_uuid()
    # Build once here: a bad argument fails the submitter, not a conductor.
    flow = registry.build(flow_name, **flow_kwargs)
    store.setdefault(keys.FLOW_ID, flow_id)
    store.setdefault(keys.TENANT_ID, owner_tenant)
    return flow_id, flow_kwargs, store, flow


def _save(backend, intent, flow):
    book = tf_models.LogBook(f"{intent.flow_name}-{intent.flow_id}", uuid=intent.flow_id)
    flow_detail = tf_models.FlowDetail(flow.name, uuid=intent.flow_id)
    factory, args, _ = registry.factory_details(intent.flow_name)
    tf_helpers.save_factory_details(flow_detail, factory, args, intent.flow_kwargs)
    flow_detail.meta["store"] = intent.store
    flow_detail.meta[META_KEY] = {
        "flow_name": intent.flow_name,
        "owner_tenant": intent.owner_tenant,
        "on_error": intent.on_error,
        "submitted_at": intent.created_at.replace(tzinfo=dt.UTC).isoformat(),
        # Whose reconciler posts it again if its job is lost (engine/reconcile.py).
        "board": intent.board,
    }
    book.add(flow_detail)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.save_logbook(book)
    return book


def materialize(board, backend, engine: sa.Engine | None, intent, flow=None) -> None:
    """Save the flow of ``intent`` (a FlowIntent) unless it exists, mark it, post its job.

    Idempotent: a flow saved already (by a submitter that died before posting)
    only gets its job, if it has none. ``flow`` is the one the submitter
    built; without it the flow is built from the intent. The mark comes
    before the post: a flow whose post failed is the reconciler's to post.
    """
    book = _existing_book(backend, intent.flow_id)
    fresh = book is None
    if fresh:
        if flow is None:
            flow = registry.rebuild(intent.flow_name, intent.flow_module,
                                    **intent.flow_kwargs)
        book = _save(backend, intent, flow)
        registry.hand_over(intent.flow_name, intent.flow_kwargs, flow)
    if engine is not None:
        with orm.Session(engine) as session, session.begin():
            intents.mark_materialized(session, intent.flow_id)
    if fresh or job_for(board, intent.flow_id) is None:
        post_job(board, book, intent.flow_id)


def submit(board, backend, flow_name: str, flow_kwargs: dict[str, Any] | None = None, *,
           store: dict[str, Any] | None = None, owner_tenant: str | None = None,
           on_error: str = ON_ERROR_REVERT, flow_id: str | None = None) -> str:
    """Save a new flow for ``flow_name`` and post its job; returns the operation id.

    ``flow_kwargs`` go to the registered factory (saved, so any conductor can
    rebuild the flow); ``store`` holds the flow's initial inputs. Both must
    be JSON-safe. ``on_error`` is ``revert`` (TaskFlow's default) or
    ``pause`` (stop before reverting, for an operator to decide). No intent
    is written: :class:`Submitter` is what operations use.
    """
    flow_id, flow_kwargs, store, flow = _prepare(flow_name, flow_kwargs, store,
                                                 owner_tenant, on_error, flow_id)
    materialize(board, backend, None, _intent(board, flow_id, flow_name, flow_kwargs, store,
                                              owner_tenant, on_error), flow=flow)
    return flow_id


def _intent(board, flow_id, flow_name, flow_kwargs, store, owner_tenant, on_error):
    factory = registry.get(flow_name)
    return intents.FlowIntent(flow_id=flow_id, board=board.name, flow_name=flow_name,
                              flow_module=factory.__module__, flow_kwargs=flow_kwargs,
                              store=store, owner_tenant=owner_tenant, on_error=on_error,
                              created_at=intents.utcnow())


def post_job(board, book, flow_id: str):
    """Post a job for flow ``flow_id`` of ``book`` (also how an operator's resume re-posts).

    This process's conductors, if any, look at the board at once.
    """
    job = board.post(flow_id, book=book, details={"flow_uuid": flow_id})
    wake_local_conductors()
    return job


def _existing_book(backend, flow_id: str):
    with contextlib.closing(backend.get_connection()) as conn:
        try:
            return conn.get_logbook(flow_id, lazy=True)
        except tf_exc.NotFound:
            return None


def job_for(board, flow_id: str):
    """The job of flow ``flow_id`` on ``board`` (claimed or not), or None."""
    for job in board.iterjobs(ensure_fresh=True):
        if job.name == flow_id:
            return job
    return None


def ensure_posted(board, backend, flow_id: str):
    """Post a job for an existing flow unless one is on the board already; returns it.

    How an operator's resume (or revert) hands a stopped flow back to the
    conductors: TaskFlow consumes a job whose flow failed or paused, so it
    must be posted again, for the same flow detail.
    """
    book = _existing_book(backend, flow_id)
    if book is None:
        raise NotFound(f"flow {flow_id} not found", flow_id=flow_id)
    return job_for(board, flow_id) or post_job(board, book, flow_id)


def _engine_of(database, backend) -> sa.Engine | None:
    if database is not None:
        return database.engine
    return getattr(backend, "engine", None)  # fleetflow's logbook backend shares it


class Submitter:
    """``submit`` bound to a board and a backend, the callable services/reservations.py takes.

    ``submitter(flow_name, flow_kwargs, store=..., tenant_id=..., on_error=..., flow_id=...,
    session=...)``

    With ``session`` (the caller's open transaction) it only checks the
    request, builds the flow and adds its intent to that transaction; the
    flow is materialized once the transaction commits, and a failure then is
    logged, not raised: the rows are committed, the reconciler finishes the
    job. Without it, the intent is written and materialized at once and
    failures are raised. Intents go to ``database`` (default: the logbook
    backend's database; none for TaskFlow's in-memory backend).
    """

    #: Tells persistence.intents.joining that this callable takes ``session=``.
    joins_transaction = True

    def __init__(self, board, backend, database=None):
        self.board = board
        self.backend = backend
        self._engine = _engine_of(database, backend)

    def __call__(self, flow_name: str, flow_kwargs: dict | None = None, *,
                 store: dict | None = None, tenant_id: str | None = None,
                 on_error: str = ON_ERROR_REVERT, flow_id: str | None = None,
                 session: orm.Session | None = None) -> str:
        flow_id, flow_kwargs, store, flow = _prepare(flow_name, flow_kwargs, store,
                                                     tenant_id, on_error, flow_id)
        intent = _intent(self.board, flow_id, flow_name, flow_kwargs, store, tenant_id,
                         on_error)
        if session is not None:
            if intents.get(session, flow_id) is None:
                intents.add(session, **_columns(intent))
            intents.on_commit(session, functools.partial(
                self._after_commit, session.get_bind(), intent, flow))
            return flow_id
        if self._engine is not None:
            with orm.Session(self._engine) as own, own.begin():
                if intents.get(own, flow_id) is None:
                    intents.add(own, **_columns(intent))
        materialize(self.board, self.backend, self._engine, intent, flow=flow)
        return flow_id

    def _after_commit(self, engine, intent, flow) -> None:
        try:
            materialize(self.board, self.backend, engine, intent, flow=flow)
        except Exception:
            LOG.warning("flow %s (%s) is committed but not posted yet; the reconciler "
                        "will post it", intent.flow_id, intent.flow_name, exc_info=True)


def _columns(intent) -> dict:
    return {"flow_id": intent.flow_id, "board": intent.board, "flow_name": intent.flow_name,
            "flow_module": intent.flow_module, "flow_kwargs": intent.flow_kwargs,
            "store": intent.store, "owner_tenant": intent.owner_tenant,
            "on_error": intent.on_error}


def load_status(backend, flow_id: str) -> dict:
    """The flow's state and every atom's state, intention and failure.

    Raises NotFound for an unknown id. A flow nobody has run yet is PENDING
    with no atoms (TaskFlow creates atom details when an engine first loads it).
    """
    with contextlib.closing(backend.get_connection()) as conn:
        try:
            flow_detail = conn.get_flow_details(flow_id)
        except tf_exc.NotFound as exc:
            raise NotFound(f"flow {flow_id} not found", flow_id=flow_id) from exc
    options = flow_meta.options(flow_detail.meta)
    return {
        "id": flow_detail.uuid,
        "name": flow_detail.name,
        "state": flow_detail.state or tf_states.PENDING,
        "flow_name": options.get("flow_name"),
        "owner_tenant": options.get("owner_tenant"),
        "on_error": options.get("on_error", ON_ERROR_REVERT),
        "paused": bool(options.get("paused")),
        "atoms": flow_views.atom_views(flow_detail),
    }
