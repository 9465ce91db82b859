"""Errors shared across layers. The API maps each ``code`` to an HTTP status."""

from __future__ import annotations


class FleetflowError(Exception):
    """Base of fleetflow's own errors; ``code`` is stable and machine-readable."""

    code = "fleetflow.error"
    status = 500

    def __init__(self, message: str = "", **details):
        super().__init__(message or self.__class__.__doc__ or self.code)
        self.message = message or (self.__class__.__doc__ or self.code).strip()
        self.details = details


class NotFound(FleetflowError):
    """The resource does not exist (or belongs to another tenant)."""

    code = "fleetflow.not_found"
    status = 404


class Conflict(FleetflowError):
    """The request conflicts with the resource's current state."""

    code = "fleetflow.conflict"
    status = 409


class InvalidInput(FleetflowError):
    """The request is malformed or names something unknown."""

    code = "fleetflow.invalid_input"
    status = 400


class StaleFence(FleetflowError):
    """A side effect was attempted by an owner that no longer holds its job."""

    code = "fleetflow.stale_fence"
    status = 409


class ServiceUnavailable(FleetflowError):
    """A service fleetflow depends on (the database) cannot answer now; try again later."""

    code = "fleetflow.service_unavailable"
    status = 503
