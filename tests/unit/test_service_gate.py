"""Tests that need a server skip without it, and fail without it under CI."""

import socket

import pytest
from _pytest.outcomes import Failed, Skipped


@pytest.fixture
def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again once the socket is


def test_missing_server_skips_outside_ci(service_gate, closed_port, monkeypatch):
    need_service, services = service_gate
    monkeypatch.setitem(services, "nothing", ("127.0.0.1", closed_port))
    monkeypatch.delenv("FLEETFLOW_REQUIRE_SERVICES", raising=False)
    with pytest.raises(Skipped, match="not reachable"):
        need_service("nothing")


def test_missing_server_fails_when_services_are_required(service_gate, closed_port,
                                                         monkeypatch):
    need_service, services = service_gate
    monkeypatch.setitem(services, "nothing", ("127.0.0.1", closed_port))
    monkeypatch.setenv("FLEETFLOW_REQUIRE_SERVICES", "1")
    with pytest.raises(Failed, match="FLEETFLOW_REQUIRE_SERVICES"):
        need_service("nothing")


def test_a_missing_restart_tool_skips_outside_ci_and_fails_under_it(missing_tool,
                                                                      monkeypatch):
    monkeypatch.delenv("FLEETFLOW_REQUIRE_SERVICES", raising=False)
    with pytest.raises(Skipped, match="rabbitmqctl"):
        missing_tool("rabbitmqctl is needed")
    monkeypatch.setenv("FLEETFLOW_REQUIRE_SERVICES", "1")
    with pytest.raises(Failed, match="FLEETFLOW_REQUIRE_SERVICES"):
        missing_tool("rabbitmqctl is needed")
