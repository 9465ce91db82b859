"""Host evacuation: the evacuate flow (registered on import)."""

from fleetflow.flows.evacuate import flow  # noqa: F401
