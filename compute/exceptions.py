"""Errors of the compute layer.

They travel over oslo.messaging: the agent raises them, the client gets the same
class back (``fleetflow.compute.exceptions`` and ``fleetflow.common.exceptions``
are the allowed remote modules), with ``details`` restored from the exception's
``kwargs`` (see ``agent._remotable``).
"""

from __future__ import annotations

from fleetflow.common.exceptions import Conflict, FleetflowError, InvalidInput, NotFound


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


class SourceAlive(Conflict):
    """A rebuild next to a living source would make two running copies of the server."""

    code = "HOST_ALIVE"
    status = 409


class LiveMigrationUnsupported(Conflict):
    """The server cannot be live-migrated (a cold migration may still move it)."""

    code = "LIVE_MIGRATION_UNSUPPORTED"
    status = 409


class MoveFailed(ComputeError):
    """A move failed, or cannot be confirmed or reverted in the state it is in."""

    code = "MIGRATION_FAILED"
    status = 409


class BackendNotFound(NotFound):
    """No storage backend of this name is served here."""

    code = "fleetflow.compute.backend_not_found"


class BackendUnreachable(Conflict):
    """The host cannot reach the storage backend (another host's disk, another rack)."""

    code = "fleetflow.compute.backend_unreachable"


class VolumeNotFound(NotFound):
    """The volume was deleted (or lives on another backend)."""

    code = "fleetflow.compute.volume_not_found"


class VolumeInUse(Conflict):
    """The volume is attached to an instance: it cannot be deleted or attached elsewhere."""

    code = "fleetflow.compute.volume_in_use"


class VolumeMismatch(Conflict):
    """A volume of this id exists with another backend, size or type."""

    code = "fleetflow.compute.volume_mismatch"


class VolumeTypeUnsupported(InvalidInput):
    """The storage backend offers no volumes of this type."""

    code = "fleetflow.compute.volume_type_unsupported"


class VolumeCreateFailed(ComputeError):
    """The storage backend failed to create the volume (nothing is left behind)."""

    code = "fleetflow.compute.volume_create_failed"
