"""The flow tests run on fleetflow's public flow-testing harness (fleetflow.testing).

``cloud`` and ``evac_cloud`` are its ``fleetflow_cloud`` and
``fleetflow_evacuation_cloud`` under the names these tests have always used.
Every test that uses them runs twice: under fleetflow's engine and under
TaskFlow's stock parallel engine (``fleetflow_engine`` overridden with both).
"""

from __future__ import annotations

import pytest


@pytest.fixture(params=["fleetflow-parallel", "parallel"])
def fleetflow_engine(request):
    return request.param


@pytest.fixture
def cloud(fleetflow_cloud):
    return fleetflow_cloud


@pytest.fixture
def evac_cloud(fleetflow_evacuation_cloud):
    return fleetflow_evacuation_cloud
