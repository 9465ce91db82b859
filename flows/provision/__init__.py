"""Reservations: the provision flow and the teardown flow (registered on import)."""

from fleetflow.flows.provision import flow, teardown  # noqa: F401
