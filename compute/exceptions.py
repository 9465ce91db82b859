"""Errors of the compute layer.

They travel over oslo.messaging: the agent raises them, the client gets the same
class back (``fleetflow.compute.exceptions`` and ``fleetflow.common.exceptions``
are the allowed remote modules), with ``details`` restored from the exception's
``kwargs`` (see ``agent._remotable``).
"""

from __future__ import annotations

from fleetflow.common.exceptions import Conflict, FleetflowError, NotFound


class ComputeError(FleetflowError):
    """A compute host could not do what it was asked."""

    code = "fleetflow.compute.error"
    status = 500


class OutcomeUnknown(ComputeError):
    """The host did not answer in time: the operation may or may not have happened.

    oslo.messaging acknowledges a request before running it, so after a timeout
    ask the host (``list_instances`` / ``get_instance``) before acting again.
    """

    code = "fleetflow.compute.outcome_unknown"
    status = 504


class HostDead(ComputeError):
    """The host is dead (fault injection): nothing was done."""

    code = "fleetflow.compute.host_dead"
    status = 503


class HostNotServed(NotFound):
    """The host is not served by this compute agent (or has no inventory)."""

    code = "fleetflow.compute.host_not_served"


class InstanceNotFound(NotFound):
    """The host has no guest with this uuid."""

    code = "fleetflow.compute.instance_not_found"


class CapacityExceeded(Conflict):
    """The build would exceed the host's real capacity: the scheduler placed badly."""

    code = "fleetflow.compute.capacity_exceeded"


class BuildFailed(ComputeError):
    """The hypervisor failed to spawn the guest (nothing is left behind)."""

    code = "fleetflow.compute.build_failed"
