"""The placement service: what the ``/placement`` routes call to read and change placement.

Every call is one transaction of the placement store (``PlacementStore``, the one
the API process shares with its other routes), so a route never holds a session:
it keeps the HTTP side (microversions, schemas, status codes, bodies) and calls
these methods for everything that touches rows.

Placement's errors (:mod:`errors`, and the catalogue's ``CatalogNotFound`` and
``DuplicateResourceClass``) and the values a route builds a write from
(``ConsumerWrite``, ``ANY_GENERATION``, ``canonical_uuid``, the inventory fields and
defaults) are the store's own; the routes take them from here.
"""

from __future__ import annotations

from fleetflow.persistence.placement import catalog, errors, tree_candidates
from fleetflow.persistence.placement.allocations import ANY_GENERATION, ConsumerWrite
from fleetflow.persistence.placement.catalog import CatalogNotFound, DuplicateResourceClass
from fleetflow.persistence.placement.providers import (
    INVENTORY_DEFAULTS,
    INVENTORY_FIELDS,
    canonical_uuid,
)

__all__ = [
    "ANY_GENERATION",
    "INVENTORY_DEFAULTS",
    "INVENTORY_FIELDS",
    "CatalogNotFound",
    "CatalogReader",
    "ConsumerWrite",
    "DuplicateResourceClass",
    "PlacementService",
    "canonical_uuid",
    "errors",
    "new_store",
]


def new_store(database, max_retries: int):
    """A placement store over ``database``, for an API process that was given none."""
    from fleetflow.persistence.placement.store import PlacementStore

    return PlacementStore(database, max_retries)


class CatalogReader:
    """The catalogue as one open transaction sees it (what a query is checked against)."""

    def __init__(self, session):
        self._session = session

    def resource_class_exists(self, name: str) -> bool:
        return catalog.resource_class_exists(self._session, name)

    def unknown_traits(self, names) -> list[str]:
        return catalog.unknown_traits(self._session, names)


class PlacementService:
    """Resource providers, inventories, traits, resource classes, aggregates,
    allocations, usages and allocation candidates of ``store``."""

    def __init__(self, store):
        self.store = store

    # -- resource providers ------------------------------------------------------------
    def create_provider(self, name: str, uuid: str | None = None,
                        parent_provider_uuid: str | None = None) -> dict:
        return self.store.create_provider(name, uuid, parent_provider_uuid)

    def get_provider(self, uuid: str) -> dict:
        return self.store.get_provider(uuid)

    def provider_exists(self, uuid: str) -> bool:
        return self.store.in_transaction(catalog.provider_exists, uuid)

    def list_providers(self, *, name=None, uuid=None, in_tree=None, resources=None) -> list[dict]:
        return self.store.list_providers(name=name, uuid=uuid, in_tree=in_tree,
                                         resources=resources)

    def filter_providers(self, uuids: list[str], traits: list[set[str]],
                         refused_traits: set[str], aggregates: list[set[str]],
                         refused_aggregates: set[str]) -> set[str]:
        """Of ``uuids``, those with one trait and one aggregate of each group, and none
        of the refused ones."""
        return self.store.in_transaction(catalog.filter_providers, uuids, traits,
                                         refused_traits, aggregates, refused_aggregates)

    def update_provider(self, uuid: str, name: str, parent_provider_uuid=None,
                        allow_reparenting: bool = False) -> dict:
        return self.store.update_provider(uuid, name, parent_provider_uuid, allow_reparenting)

    def delete_provider(self, uuid: str) -> None:
        self.store.delete_provider(uuid)

    # -- inventories ---------------------------------------------------------------------
    def get_inventories(self, uuid: str) -> tuple[int, dict]:
        return self.store.get_inventories(uuid)

    def set_inventories(self, uuid: str, generation: int, inventories: dict,
                        fence: dict | None = None) -> tuple[int, dict]:
        return self.store.set_inventories(uuid, generation, inventories, fence)

    # -- resource classes ------------------------------------------------------------------
    def list_resource_classes(self) -> list[str]:
        return self.store.in_transaction(catalog.list_resource_classes)

    def resource_class_exists(self, name: str) -> bool:
        return self.store.in_transaction(catalog.resource_class_exists, name)

    def check_resource_class(self, name: str) -> None:
        """CatalogNotFound unless ``name`` is a standard or a custom resource class."""
        self.store.in_transaction(catalog.get_resource_class, name)

    def create_resource_class(self, name: str) -> bool:
        """True when the custom class is new, False when it existed."""
        return self.store.in_transaction(catalog.create_resource_class, name)

    def rename_resource_class(self, name: str, new_name: str) -> None:
        self.store.in_transaction(catalog.rename_resource_class, name, new_name)

    def delete_resource_class(self, name: str) -> None:
        self.store.in_transaction(catalog.delete_resource_class, name)

    # -- traits ----------------------------------------------------------------------------
    def list_traits(self, associated: bool | None = None) -> list[str]:
        return self.store.in_transaction(catalog.list_traits, associated)

    def trait_exists(self, name: str) -> bool:
        return self.store.in_transaction(catalog.trait_exists, name)

    def unknown_traits(self, names) -> list[str]:
        return self.store.in_transaction(catalog.unknown_traits, names)

    def ensure_traits(self, names) -> None:
        self.store.ensure_traits(names)

    def delete_trait(self, name: str) -> None:
        self.store.in_transaction(catalog.delete_trait, name)

    def get_traits(self, uuid: str) -> tuple[int, list[str]]:
        return self.store.get_traits(uuid)

    def set_traits(self, uuid: str, generation: int, traits,
                   fence: dict | None = None) -> tuple[int, list[str]]:
        return self.store.set_traits(uuid, generation, traits, fence)

    # -- aggregates ------------------------------------------------------------------------
    def get_aggregates(self, uuid: str) -> tuple[int, list[str]]:
        return self.store.in_transaction(catalog.get_aggregates, uuid)

    def set_aggregates(self, uuid: str, aggregates: list[str],
                       generation: int | None) -> tuple[int, list[str]]:
        return self.store.in_transaction(catalog.set_aggregates, uuid, aggregates, generation)

    # -- allocations and usages ----------------------------------------------------------
    def get_allocations(self, consumer_uuid: str) -> dict:
        return self.store.get_allocations(consumer_uuid)

    def set_allocations(self, writes: list[ConsumerWrite], fence: dict | None = None) -> None:
        self.store.set_allocations(writes, fence)

    def delete_allocations(self, consumer_uuid: str, fence: dict | None = None) -> None:
        self.store.delete_allocations(consumer_uuid, fence)

    def provider_allocations(self, uuid: str) -> tuple[int, dict]:
        return self.store.provider_allocations(uuid)

    def reshape(self, inventories: dict[str, tuple[int, dict]], writes: list[ConsumerWrite],
                fence: dict | None = None) -> None:
        self.store.reshape(inventories, writes, fence)

    def provider_usages(self, uuid: str) -> tuple[int, dict[str, int]]:
        return self.store.provider_usages(uuid)

    def project_usages(self, project_id: str, user_id: str | None = None,
                       consumer_type: str | None = None) -> dict:
        return self.store.project_usages(project_id, user_id, consumer_type)

    # -- allocation candidates -------------------------------------------------------------
    def allocation_candidates(self, parse, nested_aware: bool) -> tuple[dict, dict, object]:
        """``(request, found, world)``: ``parse(CatalogReader)`` reads the request, and
        its candidates are searched in ``world``, the snapshot of placement, all in one
        read-only transaction (the catalogue the request was checked against is the
        snapshot's)."""
        def search(session):
            request = parse(CatalogReader(session))
            world = self.store.snapshots.current(session)
            found = tree_candidates.find_groups(world, request, nested_aware=nested_aware)
            return request, found, world
        return self.store.read_only(search)
