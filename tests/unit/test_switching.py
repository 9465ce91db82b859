"""The interpreter's switch interval of fleetflow's services comes from the configuration."""

import sys

import pytest

from fleetflow.common import switching


@pytest.fixture
def interval():
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_a_service_takes_the_configured_interval(make_conf, interval):
    switching.for_service(make_conf())
    assert sys.getswitchinterval() == pytest.approx(0.02)
    switching.for_service(make_conf(DEFAULT={"switch_interval": 0.05}))
    assert sys.getswitchinterval() == pytest.approx(0.05)
