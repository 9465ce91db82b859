"""Submitting an operation: logbook + flow detail + job, all under one id.

The operation id is the logbook uuid, the flow detail uuid and the job name,
so the API, the jobboard and TaskFlow's persistence all speak of one id::

    flow_id = submit(board, backend, "provision", {"reservation_id": "r-1", "count": 3},
                     owner_tenant="t1", on_error="revert")
    load_status(backend, flow_id)["state"]      # PENDING, RUNNING, SUCCESS ...

Submitting never runs anything: a conductor claims the job and runs it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow import storage as tf_storage
from taskflow.engines import helpers as tf_helpers
from taskflow.persistence import models as tf_models

from fleetflow.common import ids
from fleetflow.common.exceptions import InvalidInput, NotFound
from fleetflow.engine import taskflow_patches
from fleetflow.engine.conductor import (
    META_KEY,
    ON_ERROR_CHOICES,
    ON_ERROR_REVERT,
    wake_local_conductors,
)
from fleetflow.flows import keys, registry


def submit(board, backend, flow_name: str, flow_kwargs: dict[str, Any] | None = None, *,
           store: dict[str, Any] | None = None, owner_tenant: str | None = None,
           on_error: str = ON_ERROR_REVERT, flow_id: str | None = None) -> str:
    """Save a new flow for ``flow_name`` and post its job; returns the operation id.

    ``flow_kwargs`` go to the registered factory (saved, so any conductor can
    rebuild the flow); ``store`` holds the flow's initial inputs. Both must
    be JSON-safe. ``on_error`` is ``revert`` (TaskFlow's default) or
    ``pause`` (stop before reverting, for an operator to decide).
    """
    flow_kwargs = dict(flow_kwargs or {})
    store = dict(store or {})
    if on_error not in ON_ERROR_CHOICES:
        raise InvalidInput(f"on_error must be one of {', '.join(ON_ERROR_CHOICES)}",
                           field="on_error")
    registry.check_json_safe(store)
    flow_id = flow_id or ids.new_uuid()
    # Build once here: a bad argument fails the submitter, not a conductor.
    taskflow_patches.apply()
    flow = registry.build(flow_name, **flow_kwargs)
    store.setdefault(keys.FLOW_ID, flow_id)
    store.setdefault(keys.TENANT_ID, owner_tenant)

    if _existing_book(backend, flow_id) is not None:
        # Submitting again with a known id (the caller crashed between its own
        # rows and this call): the flow exists; make sure its job does too.
        ensure_posted(board, backend, flow_id)
        return flow_id
    book = tf_models.LogBook(f"{flow_name}-{flow_id}", uuid=flow_id)
    flow_detail = tf_models.FlowDetail(flow.name, uuid=flow_id)
    factory, args, _ = registry.factory_details(flow_name)
    tf_helpers.save_factory_details(flow_detail, factory, args, flow_kwargs)
    flow_detail.meta["store"] = store
    flow_detail.meta[META_KEY] = {
        "flow_name": flow_name,
        "owner_tenant": owner_tenant,
        "on_error": on_error,
        "submitted_at": dt.datetime.now(dt.UTC).isoformat(),
    }
    book.add(flow_detail)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.save_logbook(book)
    registry.hand_over(flow_name, flow_kwargs, flow)
    post_job(board, book, flow_id)
    return flow_id


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
            return conn.get_logbook(flow_id)
        except tf_exc.NotFound:
            return None


def job_for(board, flow_id: str):
    """The job of flow ``flow_id`` on ``board`` (claimed or not), or None."""
    for job in board.iterjobs():
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


class Submitter:
    """``submit`` bound to a board and a backend, the callable engine/operations.py takes.

    ``submitter(flow_name, flow_kwargs, store=..., tenant_id=..., on_error=..., flow_id=...)``
    """

    def __init__(self, board, backend):
        self.board = board
        self.backend = backend

    def __call__(self, flow_name: str, flow_kwargs: dict | None = None, *,
                 store: dict | None = None, tenant_id: str | None = None,
                 on_error: str = ON_ERROR_REVERT, flow_id: str | None = None) -> str:
        return submit(self.board, self.backend, flow_name, flow_kwargs, store=store,
                      owner_tenant=tenant_id, on_error=on_error, flow_id=flow_id)


def _failure_dict(failure) -> dict | None:
    if failure is None:
        return None
    # A Failure loaded from storage has no exception object, only type names.
    type_names = failure.to_dict(include_args=False).get("exc_type_names") or ["Exception"]
    return {"type": type_names[0].rsplit(".", 1)[-1], "message": failure.exception_str}


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
    meta = flow_detail.meta or {}
    atoms = []
    for atom in flow_detail:
        if atom.name == tf_storage.Storage.injector_name:
            continue  # where TaskFlow keeps injected store values, not an atom
        attempts = None
        if isinstance(atom, tf_models.RetryDetail):
            attempts = len(atom.results)
        atoms.append({
            "name": atom.name,
            "kind": "retry" if isinstance(atom, tf_models.RetryDetail) else "task",
            "state": atom.state,
            "intention": atom.intention,
            "attempts": attempts,
            "failure": _failure_dict(atom.failure),
            "revert_failure": _failure_dict(atom.revert_failure),
        })
    atoms.sort(key=lambda a: a["name"])
    return {
        "id": flow_detail.uuid,
        "name": flow_detail.name,
        "state": flow_detail.state or tf_states.PENDING,
        "flow_name": meta.get(META_KEY, {}).get("flow_name"),
        "owner_tenant": meta.get(META_KEY, {}).get("owner_tenant"),
        "on_error": meta.get(META_KEY, {}).get("on_error", ON_ERROR_REVERT),
        "paused": bool(meta.get(META_KEY, {}).get("paused")),
        "atoms": atoms,
    }
