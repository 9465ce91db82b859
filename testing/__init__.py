"""Test a flow in a few lines, against a fake fleet in one process.

``fleetflow.testing`` is the harness fleetflow's own flow tests run on, for
anyone writing a flow: a real (SQLite) fleetflow database with a fleet loaded
and registered in placement, the simulated compute hosts served over the
in-process oslo.messaging transport, the runtime the tasks use installed, and
flows run by a TaskFlow engine on TaskFlow's in-memory persistence backend.

Installed with fleetflow, its pytest plugin (``fleetflow.testing.plugin``,
registered through the ``pytest11`` entry point) gives every test session the
fixtures ``fleetflow_cloud``, ``fleetflow_evacuation_cloud``,
``fleetflow_make_conf`` and ``fleetflow_crash_points``; ``docs/testing.md``
shows a whole example. Without pytest, :func:`fake_cloud` builds the same
cloud as a context manager.
"""

from fleetflow.testing.audit import assert_audit_clean
from fleetflow.testing.cloud import FakeCloud, fake_cloud, isolated_conf
from fleetflow.testing.fleets import EVACUATION_FLEET, SMALL_FLEET

__all__ = ["EVACUATION_FLEET", "SMALL_FLEET", "FakeCloud", "assert_audit_clean",
           "fake_cloud", "isolated_conf"]
