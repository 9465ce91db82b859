"""``on_error = pause``: a flow stopped at its first final failure, before any revert.

:class:`PauseOnErrorListener`, which the conductor attaches to the engine of
every job whose flow asked for it, suspends the engine when an atom fails
for good and records the pause in the flow detail, for an operator to decide.

A failure is final unless a retry controller absorbs it. TaskFlow notifies
an atom's FAILURE and only then asks the retry controller around it what to
do: try again (another host for an instance), or revert. So the listener
asks the same question first (:func:`absorbed_by_retry`).

Asking is safe: a retry controller's ``on_failure`` reads its history (the
tries so far), and TaskFlow's part records the failure in that history only
once per atom, so TaskFlow asking again right after gets the same answer and
writes nothing more.
"""

from __future__ import annotations

import logging

from taskflow import retry as tf_retry
from taskflow import states as tf_states
from taskflow.engines.action_engine import compiler
from taskflow.listeners import base as listener_base

from fleetflow.plugin import flow_meta
from fleetflow.plugin.flow_meta import META_KEY

LOG = logging.getLogger(__name__)


class PauseOnErrorListener(listener_base.Listener):
    """Suspends the engine at the first final failure, before any revert runs.

    TaskFlow notifies FAILURE after saving it and before deciding what to
    revert; suspending then leaves the failed atom FAILURE, the others as
    they were (their revert intentions recorded, nothing reverted) and the
    flow SUSPENDED. Resuming that flow as it stands reverts it; an operator
    "resume" resets the failed atoms first.

    A failure that a retry controller absorbs (an instance's boot fails and
    its next candidate host is tried) is not final: the flow goes on.
    """

    def __init__(self, engine):
        super().__init__(engine, task_listen_for=(tf_states.FAILURE,),
                         flow_listen_for=(), retry_listen_for=(tf_states.FAILURE,))
        self.paused = False

    def _pause(self, name: str) -> None:
        LOG.warning("atom %s failed: pausing the flow for an operator", name)
        self.paused = True
        # Recorded in the flow detail, so a conductor that finds this job
        # again (we died before consuming it) leaves the flow alone too.
        options = flow_meta.options(self._engine.storage.flow_meta)
        options.update(paused=True, paused_at=name)
        self._engine.storage.update_flow_metadata({META_KEY: options})
        self._engine.suspend()

    def _receive(self, name: str, details: dict) -> None:
        if absorbed_by_retry(self._engine, name, details.get("result")):
            LOG.info("atom %s failed; its retry tries again, no pause", name)
            return
        self._pause(name)

    def _task_receiver(self, state, details):
        self._receive(details["task_name"], details)

    def _retry_receiver(self, state, details):
        self._receive(details["retry_name"], details)


def absorbed_by_retry(engine, atom_name: str, failure) -> bool:
    """True when a retry controller around ``atom_name`` will try again after ``failure``.

    Walks out through nested retries as TaskFlow does (``REVERT`` defers to
    the enclosing one); False when there is none, or when one decides to
    revert: the failure is final.
    """
    runtime = getattr(engine, "_runtime", None)
    if runtime is None or failure is None:
        return False
    node = _atoms(runtime).get(atom_name)
    while node is not None:
        retry = runtime.find_retry(node)
        if retry is None:
            return False
        strategy = runtime.fetch_action(retry).on_failure(retry, node, failure)
        if strategy == tf_retry.RETRY:
            return True
        if strategy != tf_retry.REVERT:
            return False
        node = retry
    return False


def _atoms(runtime) -> dict:
    atoms = getattr(runtime, "_fleetflow_atoms_by_name", None)
    if atoms is None:
        atoms = {node.name: node for node in runtime.iterate_nodes(compiler.ATOMS)}
        runtime._fleetflow_atoms_by_name = atoms
    return atoms
