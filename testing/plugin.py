"""pytest plugin of :mod:`fleetflow.testing`, registered as the ``pytest11`` entry point.

Fixtures (all prefixed ``fleetflow_`` so they never meet a project's own):

``fleetflow_make_conf``
    ``make(**groups)``: a configuration keeping every file in the test's
    ``tmp_path`` (see :func:`fleetflow.testing.isolated_conf`).
``fleetflow_engine``
    The TaskFlow engine the clouds run flows with: ``fleetflow-parallel`` (the
    default of ``[conductor] engine``). Override it in a ``conftest.py`` with
    ``params=["fleetflow-parallel", "parallel"]`` to run every flow test under
    both fleetflow's engine and TaskFlow's stock one.
``fleetflow_cloud``
    A :class:`fleetflow.testing.FakeCloud` of :data:`~fleetflow.testing.SMALL_FLEET`.
``fleetflow_evacuation_cloud``
    The same of :data:`~fleetflow.testing.EVACUATION_FLEET`.
``fleetflow_crash_points``
    Arms fleetflow's crash points (``FLEETFLOW_CRASH_AT``) for one test and
    records each one reached instead of killing the process, or stops the
    flow's run there (:mod:`fleetflow.testing.crash_points`).

Nothing is imported from fleetflow until a fixture is used, so the plugin costs
nothing in test sessions that do not use it (``-p no:fleetflow`` turns it off).
"""

from __future__ import annotations

import pytest

# Short RPC timeouts and move polls: a test never waits long for a fake host.
_CLOUD_OPTIONS = {"messaging": {"rpc_timeout": 5}, "compute": {"move_poll_interval": 0.01}}


@pytest.fixture
def fleetflow_make_conf(tmp_path):
    """``make(**groups)``: a configuration rooted in the test's ``tmp_path``.

    ``make(database={"connection": ...}, compute={"boot_seconds": 0.1})``
    """
    from fleetflow.testing.cloud import isolated_conf

    def make(**groups):
        return isolated_conf(tmp_path, **groups)

    return make


def _cloud(make_conf, fleet_doc, engine):
    from fleetflow.testing.cloud import fake_cloud

    options = {**_CLOUD_OPTIONS, "conductor": {"engine": engine}}
    with fake_cloud(make_conf(**options), fleet_doc) as cloud:
        # Flows run by the cloud and by conductors on its configuration alike.
        cloud.engine = engine
        yield cloud


@pytest.fixture
def fleetflow_engine():
    """The TaskFlow engine flows run with (override with params for both engines)."""
    return "fleetflow-parallel"


@pytest.fixture
def fleetflow_cloud(fleetflow_make_conf, fleetflow_engine):
    """Six hosts in two racks (:data:`fleetflow.testing.SMALL_FLEET`), ready for flows."""
    from fleetflow.testing.fleets import SMALL_FLEET

    yield from _cloud(fleetflow_make_conf, SMALL_FLEET, fleetflow_engine)


@pytest.fixture
def fleetflow_evacuation_cloud(fleetflow_make_conf, fleetflow_engine):
    """Eight hosts in two racks with local disks (:data:`fleetflow.testing.EVACUATION_FLEET`)."""
    from fleetflow.testing.fleets import EVACUATION_FLEET

    yield from _cloud(fleetflow_make_conf, EVACUATION_FLEET, fleetflow_engine)


@pytest.fixture
def fleetflow_crash_points(monkeypatch):
    """Crash points that record instead of killing: ``arm(atom, point)``, then ``reached``.

    A flow run meanwhile goes on past each point, so a test can check that a
    point is reached (and in which order); ``arm(atom, point, stop=True)``
    stops the run there instead, for :meth:`~fleetflow.testing.FakeCloud.resume`
    to finish (see docs/testing.md).
    """
    from fleetflow.common import crash_points
    from fleetflow.flows.tasks import base
    from fleetflow.testing.crash_points import CrashPoints

    points = CrashPoints(monkeypatch)
    # The tasks' points (flows/tasks/base.py) and the submission's after-commit
    # (persistence/intents.py) each call their own binding.
    monkeypatch.setattr(base, "maybe_crash", points._record)
    monkeypatch.setattr(crash_points, "maybe_crash", points._record)
    return points
