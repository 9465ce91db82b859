"""fleetflow: durable task graphs for a compute cloud."""

__version__ = "0.1.0"
