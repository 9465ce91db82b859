"""Fleet files: the topology, hosts, storage and catalogs of a cloud, in YAML.

A fleet file is compact: racks give a host count and a profile, so the default
128-host fleet and a generated 10,000-host one read the same way. ``expand``
turns it into plain host / storage / flavor / image records; ``load`` writes
those into the database idempotently (hosts keep their uuid across reloads,
because it is derived from the name) and registers them with placement
(every host and storage backend becomes a resource provider with its inventory).
"""

from __future__ import annotations

import copy
import importlib.resources
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa
import yaml
from sqlalchemy import orm

from fleetflow.common import states
from fleetflow.common.exceptions import InvalidInput
from fleetflow.persistence import models

# Host and backend uuids are uuid5(FLEET_NAMESPACE, name): stable across reloads
# and across machines, so a placement provider and its host always agree.
FLEET_NAMESPACE = uuid.UUID("5b0c6f8e-7d1a-4e1b-9a53-0f1e2d3c4b5a")
RESOURCE_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB", "GPU")
DEFAULT_FLEET = "fleet-default.yaml"


def stable_uuid(name: str) -> str:
    return str(uuid.uuid5(FLEET_NAMESPACE, name))


@dataclass
class Fleet:
    """A fleet file expanded into rows to write."""

    hosts: list[dict] = field(default_factory=list)
    storage: list[dict] = field(default_factory=list)
    flavors: list[dict] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)


def read(path: str | None = None) -> dict:
    """The fleet document at ``path``, or the shipped default fleet."""
    if path is None:
        text = importlib.resources.files("fleetflow.persistence").joinpath(
            "data", DEFAULT_FLEET).read_text()
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        raise InvalidInput(f"{path or DEFAULT_FLEET}: a fleet file is a YAML mapping")
    return doc


def _inventory(raw: dict, where: str) -> dict:
    inventory = {}
    for rc, spec in (raw or {}).items():
        if rc not in RESOURCE_CLASSES:
            raise InvalidInput(f"{where}: unknown resource class {rc!r}")
        if isinstance(spec, int):
            spec = {"total": spec}
        total = int(spec.get("total", 0))
        if total <= 0:
            raise InvalidInput(f"{where}: {rc} total must be positive")
        inventory[rc] = {"total": total,
                         "reserved": int(spec.get("reserved", 0)),
                         "allocation_ratio": float(spec.get("allocation_ratio", 1.0))}
    for rc in ("VCPU", "MEMORY_MB", "DISK_GB"):
        if rc not in inventory:
            raise InvalidInput(f"{where}: inventory needs {rc}")
    return inventory


def _rack_hosts(rack: dict, where: str) -> list[dict]:
    hosts = rack.get("hosts", [])
    if isinstance(hosts, int):
        return [{} for _ in range(hosts)]
    if not isinstance(hosts, list):
        raise InvalidInput(f"{where}: hosts is a count or a list")
    return hosts


def expand(doc: dict) -> Fleet:
    """Validate a fleet document and flatten it into records."""
    profiles = doc.get("profiles", {})
    rack_storage = doc.get("rack_storage")
    fleet = Fleet(flavors=list(doc.get("flavors", [])), images=list(doc.get("images", [])))
    names: set[str] = set()
    for region in doc.get("regions", []):
        for zone in region.get("zones", []):
            for rack in zone.get("racks", []):
                where = f"{region['name']}/{zone['name']}/{rack['name']}"
                for index, host in enumerate(_rack_hosts(rack, where), start=1):
                    profile_name = host.get("profile", rack.get("profile", "standard"))
                    if profile_name not in profiles:
                        raise InvalidInput(f"{where}: unknown profile {profile_name!r}")
                    profile = profiles[profile_name]
                    name = host.get("name") or f"{zone['name']}-{rack['name']}-h{index:02d}"
                    if name in names:
                        raise InvalidInput(f"{where}: host {name} appears twice")
                    names.add(name)
                    capabilities = {"region": region["name"], "zone": zone["name"],
                                    "rack": rack["name"]}
                    for extra in (profile.get("capabilities"), rack.get("capabilities"),
                                  host.get("capabilities")):
                        capabilities.update({k: str(v) for k, v in (extra or {}).items()})
                    fleet.hosts.append({
                        "uuid": stable_uuid(name), "name": name,
                        "state": host.get("state", states.HOST_UP),
                        "region": region["name"], "zone": zone["name"], "rack": rack["name"],
                        "inventory": _inventory(host.get("inventory")
                                                or profile.get("inventory"), name),
                        "capabilities": capabilities,
                        "traits": sorted(set(profile.get("traits", []))
                                         | set(host.get("traits", []))),
                    })
                    local = host.get("local_storage", profile.get("local_storage"))
                    if local:
                        fleet.storage.append(_backend(f"{name}-local", "host", region, zone,
                                                      rack, local, host_name=name))
                storage = rack.get("storage", rack_storage)
                if storage:
                    fleet.storage.append(_backend(f"{zone['name']}-{rack['name']}-shared",
                                                  "rack", region, zone, rack, storage))
    if not fleet.hosts:
        raise InvalidInput("a fleet needs at least one host")
    return fleet


def _backend(name, scope, region, zone, rack, spec, host_name=None) -> dict:
    return {"uuid": stable_uuid(name), "name": name, "scope": scope,
            "region": region["name"], "zone": zone["name"], "rack": rack["name"],
            "host_name": host_name, "capacity_gb": int(spec["capacity_gb"]),
            "volume_types": list(spec.get("volume_types", []))}


# Called with (session, fleet) after the rows are written and registered.
LoadHook = Callable[[orm.Session, Fleet], None]
on_loaded: list[LoadHook] = []


def _upsert(session: orm.Session, model, key: str, rows: list[dict],
            keep: tuple[str, ...] = ()) -> tuple[int, set]:
    """Insert rows whose ``key`` is new; update the others where they differ.

    ``keep`` columns are never overwritten (an operator's host state).
    Returns the number inserted and the keys of rows inserted or changed.
    """
    if not rows:
        return 0, set()
    column = getattr(model, key)
    compared = [c for c in rows[0] if c not in keep and c not in ("created_at", "updated_at")]
    existing = {r[0]: r[1:] for r in session.execute(
        sa.select(column, *(getattr(model, c) for c in compared)))}
    new = [r for r in rows if r[key] not in existing]
    if new:
        session.execute(sa.insert(model), new)
    touched = {r[key] for r in new}
    for row in rows:
        old = existing.get(row[key])
        if old is None or tuple(row[c] for c in compared) == tuple(old):
            continue
        values = {c: row[c] for c in compared if c != key}
        session.execute(sa.update(model).where(column == row[key]).values(**values)
                        .execution_options(synchronize_session=False))
        touched.add(row[key])
    return len(new), touched


def load(session: orm.Session, fleet: Fleet) -> dict[str, int]:
    """Write the fleet's rows (insert new, update changed); returns counts added.

    Every host and storage backend becomes (or is updated as) a placement
    resource provider in the same transaction.
    """
    now = models.utcnow()
    hosts = [dict(h, created_at=now, updated_at=now) for h in fleet.hosts]
    storage = [dict(s, created_at=now, updated_at=now) for s in fleet.storage]
    flavors = [{"extra_specs": {}, **f, "id": str(f["id"])} for f in fleet.flavors]
    images = [{"min_disk_gb": 0, "min_ram_mb": 0, **i} for i in fleet.images]
    # A host already known keeps its operator-set state and its uuid on reload.
    added_hosts, hosts_touched = _upsert(session, models.Host, "name", hosts,
                                         keep=("state", "state_reason", "uuid"))
    added_storage, storage_touched = _upsert(session, models.StorageBackend, "name", storage,
                                             keep=("uuid",))
    added = {"hosts": added_hosts, "storage_backends": added_storage,
             "flavors": _upsert(session, models.Flavor, "id", flavors)[0],
             "images": _upsert(session, models.Image, "id", images)[0]}
    register_providers(session, hosts_touched, storage_touched)
    for hook in on_loaded:
        hook(session, fleet)
    return added


def is_empty(session: orm.Session) -> bool:
    return session.execute(sa.select(models.Host.id).limit(1)).first() is None


def _trait(name: str) -> str:
    from fleetflow.persistence.placement import fleet as placement_fleet
    from fleetflow.persistence.placement import providers

    return name if providers.NAME_PATTERN.match(name) else placement_fleet.trait_name(name)


def register_providers(session: orm.Session, hosts: set | None = None,
                       backends: set | None = None) -> None:
    """Make hosts and storage backends placement resource providers (idempotent).

    ``hosts`` / ``backends`` name the rows to look at (every row when None;
    hosts without a provider are always looked at).
    Providers that do not exist yet are written in bulk (a 10,000-host fleet
    loads in seconds, not minutes); existing ones converge one by one, which
    writes only what changed.
    """
    from fleetflow.persistence.placement import fleet as placement_fleet
    from fleetflow.persistence.placement import models as pm

    known = set(session.scalars(sa.select(pm.ResourceProvider.uuid)))
    new_rps, new_inv, new_traits = [], [], []

    def add(uuid, name, inventory, traits, parent=None):
        new_rps.append({"uuid": uuid, "name": name, "generation": 1,
                        "parent_provider_uuid": parent, "root_provider_uuid": parent or uuid})
        for rc, spec in inventory.items():
            new_inv.append({"resource_provider_uuid": uuid, "resource_class": rc,
                            "total": spec["total"], "reserved": spec.get("reserved", 0),
                            "allocation_ratio": float(spec.get("allocation_ratio", 1.0))})
        new_traits.extend({"resource_provider_uuid": uuid, "trait": _trait(t)}
                          for t in set(traits))

    host_uuids = dict(session.execute(sa.select(models.Host.name, models.Host.uuid)).all())
    host_query = sa.select(models.Host)
    if hosts is not None:
        # A host whose provider was removed is registered again on the next load.
        host_query = host_query.where(sa.or_(
            models.Host.name.in_(hosts),
            models.Host.uuid.not_in(sa.select(pm.ResourceProvider.uuid))))
    for host in session.scalars(host_query):
        if host.uuid in known:
            placement_fleet.register_host(session, host)
        else:
            add(host.uuid, host.name, host.inventory or {},
                [*(host.traits or ()), placement_fleet.COMPUTE_TRAIT])
    backend_query = sa.select(models.StorageBackend)
    if backends is not None:
        backend_query = backend_query.where(models.StorageBackend.name.in_(backends))
    for backend in session.scalars(backend_query):
        if backend.uuid in known:
            placement_fleet.register_storage_backend(session, backend)
            continue
        parent = host_uuids.get(backend.host_name) if backend.scope == "host" else None
        add(backend.uuid, f"storage:{backend.name}",
            {"DISK_GB": {"total": int(backend.capacity_gb)}},
            [placement_fleet.STORAGE_TRAIT,
             *(placement_fleet.trait_name("VOLUME_TYPE_" + t)
               for t in backend.volume_types or ())], parent=parent)
    if new_rps:
        names = {t["trait"] for t in new_traits}
        have = set(session.scalars(sa.select(pm.Trait.name).where(pm.Trait.name.in_(names))))
        if names - have:
            session.execute(sa.insert(pm.Trait), [{"name": n} for n in sorted(names - have)])
        session.execute(sa.insert(pm.ResourceProvider), new_rps)
        session.execute(sa.insert(pm.Inventory), new_inv)
        session.execute(sa.insert(pm.ProviderTrait), new_traits)


def generate(hosts: int, seed: int = 0, hosts_per_rack: int = 16,
             racks_per_zone: int = 8) -> dict:
    """A fleet document of ``hosts`` hosts in the default fleet's shape.

    Two regions as in the default fleet; about one rack in eight is a GPU rack
    and one in four carries a blue sticker, chosen by ``seed``.
    """
    if hosts < 1:
        raise InvalidInput("hosts must be at least 1")
    base = read()
    rng = random.Random(seed)
    racks_needed = -(-hosts // hosts_per_rack)
    regions = [{"name": "north-america", "zones": []}, {"name": "europe", "zones": []}]
    remaining = hosts
    for r in range(racks_needed):
        region = regions[r % 2]
        zone_index = (r // 2) // racks_per_zone
        prefix = "na" if region["name"] == "north-america" else "eu"
        if len(region["zones"]) <= zone_index:
            region["zones"].append({"name": f"{prefix}-z{zone_index + 1:02d}", "racks": []})
        rack = {"name": f"r{len(region['zones'][zone_index]['racks']) + 1:02d}",
                "hosts": min(hosts_per_rack, remaining),
                "profile": "gpu" if rng.random() < 0.125 else "standard"}
        if rng.random() < 0.25:
            rack["capabilities"] = {"sticker": "blue"}
        remaining -= rack["hosts"]
        region["zones"][zone_index]["racks"].append(rack)
    doc = copy.deepcopy({k: base[k] for k in ("profiles", "rack_storage", "flavors", "images")})
    doc["regions"] = [r for r in regions if r["zones"]]
    return doc
