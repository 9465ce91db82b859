"""Registering the fleet's hosts and storage backends as resource providers.

Both helpers are idempotent: the fleet loader may call them on every start.
They take either a ``PlacementStore`` (own transaction) or an open SQLAlchemy
session (the loader's transaction), and converge the provider's inventory
and traits on what the host row says, bumping the generation only on change.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.persistence.placement import providers
from fleetflow.persistence.placement.models import ResourceProvider

STORAGE_TRAIT = "CUSTOM_STORAGE_BACKEND"
COMPUTE_TRAIT = "CUSTOM_COMPUTE_HOST"


def _run(session_or_store, fn):
    session_factory = getattr(getattr(session_or_store, "database", None), "session", None)
    if session_factory is None:
        return fn(session_or_store)
    with session_factory() as session:
        return fn(session)


def _converge(session, rp_uuid: str, name: str, inventories: dict, traits,
              parent: str | None = None) -> dict:
    row = session.get(ResourceProvider, rp_uuid)
    if row is None:
        row = providers.create_provider(session, name, rp_uuid, parent)
    elif row.name != name:
        row = providers.update_provider(session, rp_uuid, name, row.parent_provider_uuid)
    generation, current = providers.get_inventories(session, rp_uuid)
    wanted = {rc: providers.normalize_inventory(rc, spec) for rc, spec in inventories.items()}
    if wanted != current:
        generation, _ = providers.set_inventories(session, rp_uuid, generation, wanted)
    _, have = providers.get_traits(session, rp_uuid)
    if sorted(set(traits)) != have:
        generation, _ = providers.set_traits(session, rp_uuid, generation, traits)
    session.flush()
    return providers.provider_dict(session.get(ResourceProvider, rp_uuid))


def trait_name(text: str) -> str:
    """A free-form word as a custom trait: ``ssd-fast`` -> ``CUSTOM_SSD_FAST``."""
    clean = "".join(c if c.isalnum() else "_" for c in str(text).upper())
    return clean if clean.startswith("CUSTOM_") else "CUSTOM_" + clean


def register_host(session_or_store, host) -> dict:
    """Make ``host`` (a ``models.Host``) a provider with its inventory and traits.

    ``host.inventory`` is ``{rc: {"total", "reserved", "allocation_ratio", ...}}``;
    ``host.traits`` are trait names (made ``CUSTOM_`` when not standard-looking).
    """
    inventories = {rc: {k: v for k, v in spec.items() if k in providers.INVENTORY_FIELDS}
                   for rc, spec in (host.inventory or {}).items()}
    traits = {t if providers.NAME_PATTERN.match(t) else trait_name(t)
              for t in (host.traits or [])}
    traits.add(COMPUTE_TRAIT)
    return _run(session_or_store, lambda s: _converge(s, host.uuid, host.name, inventories,
                                                      traits))


def register_storage_backend(session_or_store, backend) -> dict:
    """Make ``backend`` (a ``models.StorageBackend``) a DISK_GB provider.

    Its provider is named ``storage:<name>`` (hosts and backends may share
    names) and carries ``CUSTOM_STORAGE_BACKEND`` plus one
    ``CUSTOM_VOLUME_TYPE_<TYPE>`` trait per volume type. A host-local backend
    becomes a child of its host's provider when that exists.
    """
    traits = {STORAGE_TRAIT} | {trait_name("VOLUME_TYPE_" + t)
                                for t in (backend.volume_types or [])}
    inventories = {"DISK_GB": {"total": int(backend.capacity_gb)}}

    def converge(session):
        parent = None
        if backend.scope == "host" and backend.host_name:
            from fleetflow.persistence.models import Host

            host_uuid = session.execute(sa.select(Host.uuid).where(
                Host.name == backend.host_name)).scalar_one_or_none()
            if host_uuid and session.get(ResourceProvider, host_uuid) is not None:
                parent = host_uuid
        return _converge(session, backend.uuid, f"storage:{backend.name}", inventories,
                         traits, parent)
    return _run(session_or_store, converge)
