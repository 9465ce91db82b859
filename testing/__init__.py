"""Test a flow in a few lines, against a fake fleet in one process.

``fleetflow.testing`` is the harness fleetflow's own flow tests run on, for
anyone writing a flow: a real (SQLite) fleetflow database with a fleet loaded
and registered in placement, the simulated compute hosts served over the
in-process oslo.messaging transport, the runtime the tasks use installed, and
flows run by a TaskFlow engine on TaskFlow's in-memory persistence backend.
A run returns an :class:`Outcome`: the flow's state and its atoms' failures.

It also gives a flow's module what it is written with: :class:`FleetTask`
(and :class:`FleetRetry`), the :func:`flow_factory` decorator and the
``runtime`` tasks reach the cloud through (``runtime.get().compute``).

Installed with fleetflow, its pytest plugin (``fleetflow.testing.plugin``,
registered through the ``pytest11`` entry point) gives every test session the
fixtures ``fleetflow_cloud``, ``fleetflow_evacuation_cloud``,
``fleetflow_make_conf`` and ``fleetflow_crash_points``; ``docs/testing.md``
shows a whole example. Without pytest, :func:`fake_cloud` builds the same
cloud as a context manager.
"""

from fleetflow.testing.audit import assert_audit_clean
from fleetflow.testing.cloud import FakeCloud, fake_cloud, isolated_conf
from fleetflow.testing.crash_points import CrashPointReached
from fleetflow.testing.fleets import EVACUATION_FLEET, SMALL_FLEET
from fleetflow.testing.outcome import Outcome

__all__ = ["EVACUATION_FLEET", "SMALL_FLEET", "CrashPointReached", "FakeCloud", "FleetRetry",
           "FleetTask", "Outcome", "assert_audit_clean", "fake_cloud", "flow_factory",
           "isolated_conf", "runtime"]

# What a flow's module is written with, imported on first use: the pytest plugin
# imports this package in every session, and the tasks' base costs it most of a second.
_FOR_FLOWS = {"FleetTask": "fleetflow.flows.tasks.base", "FleetRetry": "fleetflow.flows.tasks.base",
              "flow_factory": "fleetflow.flows.registry", "runtime": "fleetflow.flows"}


def __getattr__(name):
    import importlib

    if name not in _FOR_FLOWS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_FOR_FLOWS[name]), name)
    globals()[name] = value
    return value
