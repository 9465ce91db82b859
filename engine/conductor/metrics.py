"""Counting what a conductor does for Prometheus: atoms as they end, jobs it claimed.

:class:`AtomMetricsListener` is attached to every engine a conductor runs; each
atom that ends (SUCCESS, FAILURE, REVERTED, REVERT_FAILURE) increments
``fleetflow_atoms_total`` by its kind and outcome. The notification comes from
the engine's own thread and costs a counter increment: nothing is read or
written. Atoms are counted as they end in this process, so a flow resumed by
another conductor is counted there for what it runs there.
"""

from __future__ import annotations

from taskflow import states as tf_states
from taskflow.listeners import base as listener_base

from fleetflow.common import metrics

#: An atom's end -> the ``outcome`` label it is counted under.
OUTCOMES = {tf_states.SUCCESS: "executed", tf_states.FAILURE: "failed",
            tf_states.REVERTED: "reverted", tf_states.REVERT_FAILURE: "revert_failed"}


class AtomMetricsListener(listener_base.Listener):
    """Counts every task and retry that ends, by outcome."""

    def __init__(self, engine):
        ends = tuple(OUTCOMES)
        super().__init__(engine, task_listen_for=ends, flow_listen_for=(),
                         retry_listen_for=ends)
        # Labelled children looked up once: the receivers only increment.
        self._counters = {(kind, state): metrics.ATOMS.labels(kind, outcome)
                          for kind in ("task", "retry") for state, outcome in OUTCOMES.items()}

    def _task_receiver(self, state, details):
        counter = self._counters.get(("task", state))
        if counter is not None:
            counter.inc()

    def _retry_receiver(self, state, details):
        counter = self._counters.get(("retry", state))
        if counter is not None:
            counter.inc()
