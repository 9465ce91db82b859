"""Placement's errors. ``code`` is the string OpenStack Placement puts in its
JSON error bodies, so clients that branch on it (Nova retries on
``placement.concurrent_update``) behave the same against us.
"""

from __future__ import annotations

from fleetflow.common.exceptions import Conflict, InvalidInput, NotFound

CONCURRENT_UPDATE = "placement.concurrent_update"
INVENTORY_INUSE = "placement.inventory.inuse"
DUPLICATE_NAME = "placement.duplicate_name"
PROVIDER_IN_USE = "placement.resource_provider.inuse"
CANNOT_DELETE_PARENT = "placement.resource_provider.cannot_delete_parent"
PROVIDER_NOT_FOUND = "placement.resource_provider.not_found"
UNDEFINED = "placement.undefined_code"
# NOTE: Placement answers both of these with 409 and 'placement.undefined_code';
# we give them codes of their own so a caller can tell "full" from "lost a race"
# without parsing the message. Both stay 409, so Placement clients still work.
CAPACITY_EXCEEDED = "placement.allocation.capacity_exceeded"
CONSTRAINT_VIOLATED = "placement.allocation.constraint_violated"


class PlacementConflict(Conflict):
    """A placement write conflicts with the current state."""

    code = UNDEFINED


class ConcurrentUpdate(PlacementConflict):
    """A generation the caller sent (or read) is no longer current."""

    code = CONCURRENT_UPDATE


class ConsumerGenerationConflict(ConcurrentUpdate):
    """The consumer's generation is not the one the caller sent."""


class ProviderGenerationConflict(ConcurrentUpdate):
    """A resource provider changed between reading and writing it."""


class CapacityExceeded(PlacementConflict):
    """Not enough capacity (or no inventory) for the requested allocation."""

    code = CAPACITY_EXCEEDED


class ConstraintViolated(PlacementConflict):
    """The amount breaks the inventory's min_unit, max_unit or step_size."""

    code = CONSTRAINT_VIOLATED


class InventoryInUse(PlacementConflict):
    """An inventory that still has allocations cannot be removed."""

    code = INVENTORY_INUSE


class DuplicateProvider(PlacementConflict):
    """A resource provider with that name or uuid already exists."""

    code = DUPLICATE_NAME


class ProviderInUse(PlacementConflict):
    """The resource provider still has allocations."""

    code = PROVIDER_IN_USE


class ProviderIsFleetHost(ProviderInUse):
    """The resource provider is a fleet host's: the host must go first."""


class CannotDeleteParent(PlacementConflict):
    """The resource provider still has child providers."""

    code = CANNOT_DELETE_PARENT


class ProviderNotFound(NotFound):
    """No such resource provider."""

    code = PROVIDER_NOT_FOUND


class ConsumerNotFound(NotFound):
    """The consumer has no allocations."""

    code = UNDEFINED


class BadRequest(InvalidInput):
    """The request is malformed or names something that does not exist."""

    code = UNDEFINED


class ProviderGone(BadRequest, PlacementConflict):
    """An allocation names a resource provider that does not exist.

    Placement answers 400 (its status comes from BadRequest, first in line), but
    to a claim the provider vanished after its schedule read it: a lost claim
    like a full host, which the claim tasks handle as a PlacementConflict (the
    instance goes to its next alternate) instead of failing the operation.
    """
