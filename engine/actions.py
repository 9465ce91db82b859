"""Operator actions on flows: list, show, resume, revert.

A flow is known by its operation id (logbook uuid = flow detail uuid = job
name, see engine/submit.py). Its state is TaskFlow's flow state, plus one of
ours: ``PAUSED``, a flow that ``on_error = pause`` stopped (SUSPENDED) at its
first failure, before anything was reverted.

What the actions may do, by state:

============  =========================================  ========================
state         resume                                     revert
============  =========================================  ========================
PENDING       post the job again if it is missing        Conflict
RUNNING       post the job again if it is missing        Conflict, unless it is
              (a crashed owner's claim expires; a new    reverting already
              conductor resumes from the checkpoint)
SUSPENDED     post the job again                         every atom to REVERT
PAUSED        failed atoms re-run (PENDING/EXECUTE),     on_error = revert, every
              the others keep their results              atom to REVERT
FAILURE       REVERT_FAILURE atoms retry their revert    same as resume
              (SUCCESS/REVERT), the revert continues
SUCCESS       Conflict                                   Conflict
REVERTED      Conflict: loading it runs it from scratch  nothing to do
============  =========================================  ========================

Why the atoms are rewritten before the job is posted (TaskFlow 6.5, measured;
"Revert, retry, resume"): a conductor that loads a flow detail applies
TaskFlow's failure resolution to every atom it finds in FAILURE, so a paused
flow re-posted as it stands would be reverted, not resumed; an atom in
REVERT_FAILURE is not retried by a plain re-run, and the rest of the flow runs
again, leaking what the failed revert held. A FAILURE flow is also set
SUSPENDED, since conductors consume FAILURE flows without running them.

An operator's revert turns every failed atom into "SUCCESS, intention
REVERT" and keeps its failure: its revert gets that ``Failure`` as ``result``
(docs/architecture.md, "A revert undoes whatever execute may have done")
and retry controllers are not asked again: the operator chose to revert, not
to try another host.

Both actions are idempotent: a second call finds nothing left to rewrite and
the job already posted. Only one operator action at a time is expected per
flow; concurrent calls may each post a job (ensure_posted is not atomic) —
conductors consume the extra one as soon as the flow is settled.
"""

from __future__ import annotations

import contextlib
import logging

from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow.persistence import models as tf_models

from fleetflow.common.exceptions import Conflict, InvalidInput, NotFound
from fleetflow.engine import flow_progress, flow_views, taskflow_retry_fix
from fleetflow.engine import submit as submit_mod
from fleetflow.plugin import flow_meta
from fleetflow.plugin.flow_meta import ON_ERROR_REVERT

LOG = logging.getLogger(__name__)

#: Derived flow state: stopped by ``on_error = pause`` for an operator.
PAUSED = "PAUSED"
FLOW_STATES = (tf_states.PENDING, tf_states.RUNNING, tf_states.SUCCESS, tf_states.FAILURE,
               tf_states.REVERTED, tf_states.SUSPENDED, tf_states.SUSPENDING,
               tf_states.RESUMING, tf_states.REVERTING, PAUSED)
RESUMABLE = frozenset({tf_states.PENDING, tf_states.RUNNING, tf_states.SUSPENDED,
                       tf_states.SUSPENDING, tf_states.RESUMING, PAUSED, tf_states.FAILURE})
REVERTIBLE = frozenset({tf_states.SUSPENDED, PAUSED, tf_states.FAILURE})
# Flow states in which an engine may still be writing atoms: we only re-post.
_LIVE = frozenset({tf_states.PENDING, tf_states.RUNNING, tf_states.SUSPENDING,
                   tf_states.RESUMING})
_LIST_BATCH = 500


def _options(flow_detail) -> dict:
    return flow_meta.options(flow_detail.meta)


def flow_state(flow_detail) -> str:
    """TaskFlow's state of ``flow_detail``, or PAUSED for a flow paused on error."""
    state = flow_detail.state or tf_states.PENDING
    if state == tf_states.SUSPENDED and _options(flow_detail).get("paused"):
        return PAUSED
    return state


def _summary(flow_detail) -> dict:
    options = _options(flow_detail)
    return {
        "id": flow_detail.uuid,
        "name": options.get("flow_name") or flow_detail.name,
        "state": flow_state(flow_detail),
        "owner_tenant": options.get("owner_tenant"),
        "on_error": options.get("on_error", ON_ERROR_REVERT),
        "submitted_at": options.get("submitted_at"),
        "paused_at": options.get("paused_at") if options.get("paused") else None,
    }


# -- list ---------------------------------------------------------------------------


def _flow_details_after(backend, marker: str | None):
    """Every flow detail (lazy: no atoms) after ``marker``, newest first.

    Newest first like every list of the API: by creation time, then by uuid
    among flows made in the same instant. fleetflow's logbook backend is read a
    batch at a time; any other TaskFlow backend (the in-memory one of tests),
    whose flow details keep no creation time, is read whole and ordered by when
    fleetflow submitted each flow.
    """
    from fleetflow.persistence.logbook.backend import LogbookBackend

    if isinstance(backend, LogbookBackend):
        yield from _logbook_flow_details_after(backend, marker)
        return
    with contextlib.closing(backend.get_connection()) as conn:
        details = [fd for book in conn.get_logbooks(lazy=True)
                   for fd in conn.get_flows_for_book(book.uuid, lazy=True)]
    details.sort(key=lambda fd: (_options(fd).get("submitted_at") or "", fd.uuid),
                 reverse=True)
    if marker is not None:
        position = next((i for i, fd in enumerate(details) if fd.uuid == marker), None)
        if position is None:
            raise InvalidInput(f"marker: no flow {marker}", field="marker")
        details = details[position + 1:]
    yield from details


def _logbook_flow_details_after(backend, marker: str | None):
    import sqlalchemy as sa
    from oslo_serialization import jsonutils

    from fleetflow.persistence.logbook.models import FLOWDETAILS

    columns = FLOWDETAILS.c
    after = None
    if marker is not None:
        with backend.engine.connect() as conn:
            created_at = conn.scalar(sa.select(columns.created_at)
                                     .where(columns.uuid == marker))
        if created_at is None:
            raise InvalidInput(f"marker: no flow {marker}", field="marker")
        after = (created_at, marker)
    while True:
        stmt = (sa.select(columns.uuid, columns.name, columns.state, columns.meta,
                          columns.created_at)
                .order_by(columns.created_at.desc(), columns.uuid.desc()).limit(_LIST_BATCH))
        if after is not None:
            stmt = stmt.where(sa.or_(columns.created_at < after[0], sa.and_(
                columns.created_at == after[0], columns.uuid < after[1])))
        with backend.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        for uuid, name, state, meta, _created_at in rows:
            yield tf_models.FlowDetail.from_dict({
                "uuid": uuid, "name": name, "state": state,
                "meta": jsonutils.loads(meta) if meta else {}})
        if len(rows) < _LIST_BATCH:
            return
        after = (rows[-1][4], rows[-1][0])


def list_flows(backend, state: str | None = None, tenant: str | None = None,
               limit: int = 100, marker: str | None = None) -> tuple[list[dict], bool]:
    """One page of flows, newest first: ``(summaries, more)``.

    ``state`` filters on the (derived) state: PAUSED flows are not listed as
    SUSPENDED. ``tenant`` keeps the flows whose owner tenant it is. ``marker``
    is the id of the last flow of the previous page; ``more`` says a next
    page exists.
    """
    if state is not None and state not in FLOW_STATES:
        raise InvalidInput(f"state must be one of {', '.join(FLOW_STATES)}", field="state")
    page: list[dict] = []
    for flow_detail in _flow_details_after(backend, marker):
        summary = _summary(flow_detail)
        if state is not None and summary["state"] != state:
            continue
        if tenant is not None and summary["owner_tenant"] != tenant:
            continue
        if len(page) == limit:
            return _with_progress(backend, page), True
        page.append(summary)
    return _with_progress(backend, page), False


def _with_progress(backend, flows: list[dict]) -> list[dict]:
    """Each flow with when it was last written and last made progress."""
    found = flow_progress.progress(backend, [f["id"] for f in flows])
    for flow in flows:
        flow.update(found[flow["id"]])
    return flows


# -- show ---------------------------------------------------------------------------


def _load(backend, flow_id: str):
    # NOTE: without the fix a retry's history is decoded wrong, and writing
    # it back (resume, revert) would store the damage for good.
    taskflow_retry_fix.apply()
    with contextlib.closing(backend.get_connection()) as conn:
        try:
            return conn.get_flow_details(flow_id)
        except tf_exc.NotFound as exc:
            raise NotFound(f"flow {flow_id} not found", flow_id=flow_id) from exc


def load_visible(backend, flow_id: str, tenant: str | None = None) -> tuple:
    """``(flow detail, summary)`` of a flow; with ``tenant``, another tenant's is NotFound."""
    flow_detail = _load(backend, flow_id)
    view = _summary(flow_detail)
    if tenant is not None and view["owner_tenant"] != tenant:
        raise NotFound(f"flow {flow_id} not found", flow_id=flow_id)
    return flow_detail, _with_progress(backend, [view])[0]


def show_flow(backend, flow_id: str, tenant: str | None = None) -> dict:
    """The flow's summary and every atom (name, kind, state, intention, attempts, failure).

    ``failure`` of the flow is the first failed atom's (what an operator
    looks at first). With ``tenant``, another tenant's flow is NotFound.
    """
    flow_detail, view = load_visible(backend, flow_id, tenant)
    atoms = flow_views.atom_views(flow_detail)
    view["atoms"] = atoms
    failed = [a for a in atoms if a["state"] in (tf_states.FAILURE, tf_states.REVERT_FAILURE)]
    first = failed[0] if failed else None
    view["failure"] = (first["failure"] or first["revert_failure"]) if first else None
    return view


# -- resume / revert ------------------------------------------------------------------


def _save(backend, flow_detail, changed: list[str]) -> None:
    """Write the ``changed`` atoms, then the flow's own state and meta.

    Only what was rewritten is written back, so nothing else an engine
    checkpointed can be overwritten with what this read; atoms go first so a
    conductor never finds the flow unpaused with its failed atom not reset.
    """
    with contextlib.closing(backend.get_connection()) as conn:
        for atom in flow_views.atoms(flow_detail):
            if atom.name in changed:
                conn.update_atom_details(atom)
        bare = tf_models.FlowDetail(flow_detail.name, flow_detail.uuid)
        bare.state, bare.meta = flow_detail.state, flow_detail.meta
        conn.update_flow_details(bare)


def _reset_for_resume(flow_detail) -> list[str]:
    """Rewrite a stopped flow's atoms so that the next run carries on; returns their names."""
    changed = []
    reverting = flow_detail.state == tf_states.FAILURE
    for atom in flow_views.atoms(flow_detail):
        if atom.state == tf_states.REVERT_FAILURE:
            # Only this revert is retried; the run then goes on reverting.
            atom.state, atom.intention, atom.revert_failure = (
                tf_states.SUCCESS, tf_states.REVERT, None)
        elif reverting:
            continue  # a flow that was reverting keeps reverting
        elif atom.state in (tf_states.FAILURE, tf_states.REVERTED):
            # Runs again; its failure is cleared. A REVERTED atom in a flow
            # that was not reverting was undone by a revert that started
            # before the pause took hold (parallel engine): do it again too.
            atom.reset(tf_states.PENDING)
        elif (atom.state in (tf_states.SUCCESS, tf_states.PENDING)
              and atom.intention in (tf_states.REVERT, tf_states.RETRY)):
            # Intentions recorded by the failure resolution that the pause
            # stopped short of acting on: done atoms stay done.
            atom.intention = tf_states.EXECUTE
        else:
            continue
        changed.append(atom.name)
    return changed


def _mark_for_revert(flow_detail) -> list[str]:
    """Every atom to REVERT, as TaskFlow's RevertAll does; failed atoms keep their failure."""
    changed = []
    for atom in flow_views.atoms(flow_detail):
        before = (atom.state, atom.intention)
        if atom.state in (tf_states.FAILURE, tf_states.REVERT_FAILURE):
            # NOTE: not left in FAILURE: on load the engine would ask the
            # atom's retry controller, which may retry instead of reverting.
            atom.state, atom.revert_failure = tf_states.SUCCESS, None
        if atom.state not in (tf_states.REVERTED, tf_states.IGNORE):
            atom.intention = tf_states.REVERT
        if (atom.state, atom.intention) != before:
            changed.append(atom.name)
    return changed


def _post_again(board, backend, flow_id: str, state: str) -> None:
    """Make sure a job that a conductor will run is on the board for ``flow_id``.

    A conductor that paused (or failed) a flow consumes its job only after the
    engine has saved that state, so an operator can act while the old job is
    still claimed and about to disappear: then a new one is posted. A job
    claimed while the flow is merely SUSPENDED is being abandoned (stays), an
    unclaimed one is waiting for a conductor: either will run the flow.
    """
    job = submit_mod.job_for(board, flow_id)
    if job is None:
        submit_mod.ensure_posted(board, backend, flow_id)
        return
    if state in (PAUSED, tf_states.FAILURE):
        try:
            owner = board.find_owner(job)
        except tf_exc.NotFound:  # consumed since we looked
            owner = None
            job = None
        if owner is not None or job is None:
            with contextlib.closing(backend.get_connection()) as conn:
                book = conn.get_logbook(flow_id)
            LOG.info("flow %s: its old job is held by %s and will be consumed; posting "
                     "a new one", flow_id, owner)
            submit_mod.post_job(board, book, flow_id)


def _stopped_detail(backend, flow_id: str, allowed: frozenset, action: str):
    flow_detail = _load(backend, flow_id)
    state = flow_state(flow_detail)
    if state not in allowed:
        hint = {tf_states.REVERTED: " (resuming it would run it again from scratch)",
                tf_states.RUNNING: " (wait for it, or resume it if its conductor died)"}
        raise Conflict(f"flow {flow_id} is {state}: it cannot be {action}"
                       f"{hint.get(state, '')}", flow_id=flow_id, state=state)
    return flow_detail, state


def resume(board, backend, flow_id: str) -> dict:
    """Make a stopped flow runnable from its last checkpoint and post its job.

    Returns the flow as :func:`show_flow` shows it. NotFound for an unknown
    id, Conflict for a SUCCESS or REVERTED flow.
    """
    flow_detail, state = _stopped_detail(backend, flow_id, RESUMABLE, "resumed")
    if state not in _LIVE:
        changed = _reset_for_resume(flow_detail)
        options = _options(flow_detail)
        options.pop("paused", None)
        options.pop("paused_at", None)
        flow_detail.meta = flow_meta.with_options(flow_detail.meta, options)
        if flow_detail.state == tf_states.FAILURE:
            flow_detail.state = tf_states.SUSPENDED  # conductors skip FAILURE flows
        _save(backend, flow_detail, changed)
        LOG.info("flow %s (%s) resumed; atoms reset: %s", flow_id, state, changed or "none")
    _post_again(board, backend, flow_id, state)
    return show_flow(backend, flow_id)


def _reverting(flow_detail) -> bool:
    """True when an operator's revert was applied (on_error revert, atoms marked)."""
    return (_options(flow_detail).get("on_error") == ON_ERROR_REVERT
            and any(a.intention == tf_states.REVERT for a in flow_views.atoms(flow_detail)))


def revert(board, backend, flow_id: str) -> dict:
    """Switch a stopped (paused, suspended or failed) flow to reverting and post its job.

    Sets ``on_error`` to ``revert`` (a later failure of a revert is not
    paused either) and marks every atom for revert. NotFound for an unknown
    id, Conflict for a flow in any other state. Asking again is harmless: a
    flow already reverted or reverting is shown as it is.
    """
    flow_detail = _load(backend, flow_id)
    state = flow_state(flow_detail)
    if state == tf_states.REVERTED or (state in _LIVE and _reverting(flow_detail)):
        # Asked again: reverted already, or a conductor is reverting it.
        return show_flow(backend, flow_id)
    flow_detail, state = _stopped_detail(backend, flow_id, REVERTIBLE, "reverted")
    changed = _mark_for_revert(flow_detail)
    options = _options(flow_detail)
    options.pop("paused", None)
    options.pop("paused_at", None)
    options["on_error"] = ON_ERROR_REVERT
    flow_detail.meta = flow_meta.with_options(flow_detail.meta, options)
    if flow_detail.state == tf_states.FAILURE:
        flow_detail.state = tf_states.SUSPENDED
    _save(backend, flow_detail, changed)
    LOG.info("flow %s (%s) set to revert; atoms marked: %s", flow_id, state,
             changed or "none")
    _post_again(board, backend, flow_id, state)
    return show_flow(backend, flow_id)
