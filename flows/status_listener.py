"""Reservation status from flow transitions the tasks themselves cannot see.

The provision tasks write their own instance rows and the lifecycle tasks the
reservation's outcome (docs/architecture.md, "Status lives in rows": the API
reads rows, never TaskFlow's atom details). What no task sees is the flow
stopping or starting again, so
this listener, attached to the engine that runs a flow whose store holds
``reservation_id``, writes:

=====================================  ===================================
flow transition                        reservation status
=====================================  ===================================
SUSPENDED, paused by ``on_error``      PAUSED
RUNNING while the row says PAUSED      BUILDING (an operator resumed it),
                                       REVERTING (an operator reverted it)
the whole flow starts reverting        REVERTING
=====================================  ===================================

TaskFlow has no REVERTING *flow* state: the flow stays RUNNING while its
atoms revert. "The whole flow" is told apart from a retry reverting one
instance's subflow (to try the next host) by the flow's top-level atoms: a
full revert gives every atom the REVERT intention, a retry only its subflow.
The lifecycle marker writes REVERTED (or ERROR) itself at the end.

A vcluster's flow (``vcluster_id`` in its store) gets the same transitions;
resumed, it reads BUILDING (a create), UPDATING (an add or a remove) or
DELETING (a delete) again.

The flows whose store holds one of those ids declare it
(``@flow_factory("provision", listeners=(ReservationStatusListener,))``,
flows/registry.py); the conductor (engine/conductor/worker.py) attaches what the
job's flow declared, next to its pause listener, and tells it how to know a
suspended flow is paused for an operator rather than stopped::

    ReservationStatusListener(
        engine, database, paused=lambda: flow_meta.is_paused(engine.storage.flow_meta))

It lives with the flows because it writes their rows (the same rows the
lifecycle tasks write); the engine only attaches it. Taking the pause as a
callable keeps it free of the engine's flow-detail format, so flows/ never
imports engine/.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import sqlalchemy as sa
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow.listeners import base as listener_base

from fleetflow.common import states
from fleetflow.flows import keys
from fleetflow.persistence.models import Reservation, VCluster

LOG = logging.getLogger(__name__)

_UNSET = object()
# A vcluster resumed by an operator reads what its run was doing.
_VCLUSTER_RESUMED = {states.RUN_CREATE: states.BUILDING, states.RUN_ADD: states.UPDATING,
                     states.RUN_REMOVE: states.UPDATING, states.RUN_DELETE: states.DELETING}


class ReservationStatusListener(listener_base.Listener):
    """Writes a reservation's PAUSED / BUILDING / REVERTING from its flow's transitions.

    ``database`` defaults to the flow runtime's (flows/runtime.py). ``paused``
    says whether the engine's flow, once SUSPENDED, waits for an operator (it
    was paused on an error) rather than for the next conductor. A flow without
    ``reservation_id`` (or ``vcluster_id``) in its store is ignored.
    """

    def __init__(self, engine, database=None, *, paused: Callable[[], bool]):
        super().__init__(engine,
                         task_listen_for=(tf_states.REVERTING,),
                         flow_listen_for=(tf_states.RUNNING, tf_states.SUSPENDED),
                         retry_listen_for=(tf_states.REVERTING,))
        self._database = database
        self._paused = paused
        self._reservation_id = _UNSET
        self._root_atoms: list[str] | None = None
        self._reverting_written = False

    # -- what and where -----------------------------------------------------------

    def _fetch(self, key: str):
        try:
            return self._engine.storage.fetch(key)
        except tf_exc.NotFound:
            return None

    def _reservation(self) -> str | None:
        """The id of the row this flow reports on (a reservation's or a vcluster's)."""
        if self._reservation_id is _UNSET:
            self._model, self._resumed = Reservation, states.BUILDING
            self._reservation_id = self._fetch(keys.RESERVATION_ID)
            if self._reservation_id is None:
                self._reservation_id = self._fetch(keys.VCLUSTER_ID)
                if self._reservation_id is not None:
                    self._model = VCluster
                    self._resumed = _VCLUSTER_RESUMED.get(self._fetch(keys.VCLUSTER_RUN),
                                                          states.BUILDING)
        return self._reservation_id

    def _db(self):
        if self._database is None:
            from fleetflow.flows import runtime

            self._database = runtime.get().database
        return self._database

    def _write(self, status: str, only_from: tuple[str, ...] | None = None) -> None:
        reservation_id = self._reservation()
        if reservation_id is None:
            return
        model = self._model
        stmt = sa.update(model).where(model.id == reservation_id)
        if only_from is not None:
            stmt = stmt.where(model.status.in_(only_from))
        database = self._db()

        def write() -> int:
            with database.session() as session:
                return session.execute(stmt.values(status=status)).rowcount

        # An outage is waited out (the write is absolute: running it twice is
        # harmless); after the window the row is left as it was, logged.
        retrying = getattr(database, "retrying", None)
        try:
            changed = (write() if retrying is None
                       else retrying(write, f"writing status {status} of {reservation_id}"))
        except Exception:  # noqa: BLE001 - a status row must never break the flow
            LOG.exception("could not write status %s of %s %s", status,
                          model.__tablename__, reservation_id)
            return
        if changed:
            LOG.info("%s %s is %s", model.__tablename__, reservation_id, status)

    # -- flow -------------------------------------------------------------------

    def _flow_receiver(self, state, details):
        if state == tf_states.SUSPENDED and self._paused():
            self._write(states.PAUSED)
        elif state == tf_states.RUNNING:
            # Only a PAUSED row moves: a fresh run's tasks write their own
            # progress, and a settled row must stay as the lifecycle left it.
            # An operator's revert marked every atom REVERT before re-posting.
            if self._top_level_atoms() and self._whole_flow_reverts():
                self._reverting_written = True
                self._write(states.REVERTING, only_from=(states.PAUSED,))
            else:
                self._reservation()
                self._write(self._resumed, only_from=(states.PAUSED,))

    # -- atoms ------------------------------------------------------------------

    def _top_level_atoms(self) -> list[str]:
        """Names of the atoms directly in the outermost flow (no retry around them)."""
        if self._root_atoms is None:
            try:
                hierarchy = self._engine.compilation.hierarchy
                self._root_atoms = [node.item.name for node in hierarchy
                                    if node.metadata.get("kind") in ("task", "retry")]
            except Exception:  # noqa: BLE001 - unknown engine shape: no distinction
                self._root_atoms = []
        return self._root_atoms

    def _whole_flow_reverts(self) -> bool:
        roots = self._top_level_atoms()
        if not roots:
            return True
        storage = self._engine.storage
        return any(storage.get_atom_intention(name) == tf_states.REVERT for name in roots)

    def _atom_reverting(self) -> None:
        if self._reverting_written or self._reservation() is None:
            return
        if self._whole_flow_reverts():
            self._reverting_written = True
            self._write(states.REVERTING)

    def _task_receiver(self, state, details):
        self._atom_reverting()

    def _retry_receiver(self, state, details):
        self._atom_reverting()
