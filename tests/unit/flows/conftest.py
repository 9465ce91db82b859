"""The flow tests run on fleetflow's public flow-testing harness (fleetflow.testing).

``cloud`` and ``evac_cloud`` are its ``fleetflow_cloud`` and
``fleetflow_evacuation_cloud`` under the names these tests have always used.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def cloud(fleetflow_cloud):
    return fleetflow_cloud


@pytest.fixture
def evac_cloud(fleetflow_evacuation_cloud):
    return fleetflow_evacuation_cloud
