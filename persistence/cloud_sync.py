"""The cloud's view written into fleetflow's rows: hosts, catalogs and others' usage.

With ``[cloud] driver = openstack`` fleetflow still schedules on its own rows
(hosts, and its placement ledger); :func:`apply` makes those rows mirror a
``CloudView`` (``compute.openstack.inventory``, read here by attribute only:
persistence does not import compute). Every decision below is one the cloud
owns; what fleetflow owns is left alone:

- A host is named after its nova-compute service and keeps fleetflow's own
  uuid, ``fleet.stable_uuid(name)``, which is also its provider in the ledger.
  The cloud's provider uuid is not stored: only reading the cloud needs it, and
  the view maps service hosts to it every time.
- Topology: region (the caller's), zone (Nova's availability zone), rack (the
  ``fleetflow_rack`` metadata of its aggregates, else ``default``);
  capabilities are those three plus every aggregate metadata key but
  ``availability_zone``; traits and inventory are its provider's.
- State is what was decided about the service: ``down`` (forced down),
  ``disabled``, else ``up``. Whether it is alive is not a state but its
  heartbeat, as for a simulated host: Nova's servicegroup reads a silent
  service ``down`` once its last beat (``updated_at``) is older than Nova's
  ``service_down_time``; :func:`write_heartbeats` then sets the host's
  ``heartbeat_at`` to that beat (NULL while Nova reads it up), so it reads
  ``down`` through ``[compute] service_down_time`` and the recovery monitor
  can suspect it (docs/recovery.md). The state is written on every sync,
  because ``fleet.load`` keeps a known host's state, with four exceptions: a
  host held by an evacuation keeps the state the evacuation set (it fences its
  hosts and ends by releasing them); a host an operator put in ``maintenance``
  stays so while Nova reports its service disabled (maintenance is a kind of
  disabled); a ``down`` host stays ``down`` while its service is silent (only
  a living service lifts a fence); and a ``down`` host keeps its reason (who
  fenced it: an operator, or the recovery's ``automatic``).
  A host's provider carries ``COMPUTE_STATUS_DISABLED`` exactly when its state
  is not ``up``, as ``services.hosts`` keeps it.
- A host the cloud no longer reports goes ``down``; its row is never deleted. A
  service not in Placement yet (no inventory) adds no host until it is.
- Inventory is the cloud's, but a class the cloud dropped that fleetflow's own
  instances still hold stays until they let go of it (the ledger cannot remove
  inventory in use).
- Others' usage: what the cloud uses on a host beyond what fleetflow's own
  ACTIVE and BUILDING instances there take (their flavors) is held in the
  ledger by one consumer per host, ``stable_uuid("external:" + host)`` of type
  ``EXTERNAL``, replaced on every sync, so the scheduler does not overbook. A
  resource class where the difference is not positive holds nothing; none is
  held beyond what the ledger still has room for.
- Flavors and images are the cloud's. A flavor's ``disk_gb`` is what Nova
  claims for it (root + ephemeral + swap). A stale row whose name the cloud
  now gives to another id is renamed ``<name>~<id>`` (names are unique here).
"""

from __future__ import annotations

import math

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.common import states
from fleetflow.persistence import fleet, models
from fleetflow.persistence.placement import allocation_reads, providers
from fleetflow.persistence.placement import allocations as allocs
from fleetflow.persistence.placement import fleet as placement_fleet
from fleetflow.persistence.placement.models import Allocation, Inventory, ProviderTrait

RACK_KEY = "fleetflow_rack"
DEFAULT_RACK = "default"
DISABLED_TRAIT = "COMPUTE_STATUS_DISABLED"
EXTERNAL_TYPE = "EXTERNAL"
# Project and user of the external consumers (fleetflow's quotas never count them).
EXTERNAL_OWNER = "fleetflow-external"
# Instances that occupy their host in the cloud as fleetflow sees it.
OWN_STATUSES = (states.ACTIVE, states.BUILDING)
INVENTORY_KEYS = ("total", "reserved", "allocation_ratio")
VANISHED_REASON = "not reported by the cloud any more"


def external_consumer(host: str) -> str:
    return fleet.stable_uuid("external:" + host)


def service_state(service: dict) -> tuple[str, str | None]:
    """(fleetflow host state, reason) of a nova-compute service."""
    if service["forced_down"]:
        return states.HOST_DOWN, "nova-compute is forced down"
    if service["status"] != "enabled":
        return states.HOST_DISABLED, service.get("disabled_reason") or "nova-compute is disabled"
    return states.HOST_UP, None


def host_records(view, region: str) -> list[dict]:
    """The view's hosts as ``fleet.Fleet`` host records (hosts without inventory skipped)."""
    records = []
    for service in sorted(view.services, key=lambda s: s["host"]):
        name = service["host"]
        provider = view.providers.get(name)
        inventory = {rc: {k: spec[k] for k in INVENTORY_KEYS if k in spec}
                     for rc, spec in sorted(view.inventories.get(provider, {}).items())}
        if not inventory:
            continue  # not registered in Placement yet: nothing to schedule onto
        metadata: dict[str, str] = {}
        for aggregate in sorted(view.aggregates, key=lambda a: a["name"]):
            if name in aggregate["hosts"]:
                metadata.update({k: str(v) for k, v in aggregate["metadata"].items()
                                 if k != "availability_zone"})
        rack = metadata.get(RACK_KEY, DEFAULT_RACK)
        state, reason = service_state(service)
        records.append({
            "uuid": fleet.stable_uuid(name), "name": name, "state": state,
            "state_reason": reason, "region": region, "zone": service["zone"], "rack": rack,
            "inventory": inventory,
            "capabilities": {**metadata, "region": region, "zone": service["zone"],
                             "rack": rack},
            "traits": sorted(set(view.traits.get(provider, [])) - {DISABLED_TRAIT}),
        })
    return records


def _make_room_for_inventory(session: orm.Session, hosts: list[dict],
                             external: set[str]) -> None:
    """Let ``fleet.load`` drop the classes the cloud dropped (the ledger refuses to remove
    inventory in use): an external consumer holding one lets go of everything now (it is
    written again afterwards); a class fleetflow's own consumers still hold is kept
    until they let go of it."""
    by_uuid = {h["uuid"]: h for h in hosts}
    current = dict(session.execute(sa.select(models.Host.uuid, models.Host.inventory)
                                   .where(models.Host.uuid.in_(by_uuid))).all())
    released = set()
    for consumer, uuid, rc in session.execute(
            sa.select(Allocation.consumer_uuid, Allocation.resource_provider_uuid,
                      Allocation.resource_class)
            .where(Allocation.resource_provider_uuid.in_(by_uuid))):
        if rc in by_uuid[uuid]["inventory"]:
            continue
        if consumer in external:
            released.add(consumer)
        elif (current.get(uuid) or {}).get(rc) is not None:
            by_uuid[uuid]["inventory"][rc] = current[uuid][rc]
    if released:
        allocs.replace_allocations(session, [
            allocs.ConsumerWrite(c, {}, EXTERNAL_OWNER, EXTERNAL_OWNER, allocs.ANY_GENERATION,
                                 EXTERNAL_TYPE) for c in sorted(released)])


def flavor_records(view) -> list[dict]:
    return [{"id": f["id"], "name": f["name"], "vcpus": f["vcpus"], "ram_mb": f["ram"],
             "disk_gb": f["disk"] + f["ephemeral"] + math.ceil(f["swap"] / 1024),
             "extra_specs": dict(f["extra_specs"])}
            for f in sorted(view.flavors, key=lambda f: f["id"])]


def image_records(view) -> list[dict]:
    """Images with unique names (the image service allows duplicates: later ids get
    ``<name> (<id>)``)."""
    records, taken = [], set()
    for image in sorted(view.images, key=lambda i: i["id"]):
        name = image["name"]
        if name in taken:
            name = f"{name} ({image['id']})"
        taken.add(name)
        records.append({"id": image["id"], "name": name, "min_disk_gb": image["min_disk"],
                        "min_ram_mb": image["min_ram"]})
    return records


def _free_names(session: orm.Session, model, records: list[dict]) -> None:
    """Rename stale rows whose name a record gives to another id."""
    wanted = {r["name"]: r["id"] for r in records}
    for row_id, name in session.execute(sa.select(model.id, model.name).where(
            model.name.in_(wanted))).all():
        if wanted[name] != row_id:
            session.execute(sa.update(model).where(model.id == row_id)
                            .values(name=f"{name}~{row_id}"[:255]))


def _write_states(session: orm.Session, wanted: dict[str, tuple[str, str | None]],
                  silent: set[str]) -> None:
    rows = session.execute(sa.select(models.Host.name, models.Host.state,
                                     models.Host.state_reason, models.Host.evacuation_id)
                           .where(models.Host.name.in_(wanted))).all()
    for name, state, reason, evacuation_id in rows:
        new_state, new_reason = wanted[name]
        if evacuation_id is not None or (state, reason) == (new_state, new_reason):
            continue
        if state == states.HOST_MAINTENANCE and new_state == states.HOST_DISABLED:
            continue
        # A fence (the recovery's, before Nova is told, or an operator's) is lifted
        # by a service that beats again, not by one that is merely not forced down.
        if state == states.HOST_DOWN and (new_state == states.HOST_DOWN or name in silent):
            continue
        session.execute(sa.update(models.Host).where(models.Host.name == name).values(
            state=new_state, state_reason=new_reason, updated_at=models.utcnow()))


def write_heartbeats(session: orm.Session, services: list[dict]) -> int:
    """Each service's host's ``heartbeat_at``: its last beat while Nova reads it down,
    NULL while Nova reads it up; returns the hosts changed.

    Only a silent service's beat is kept: a live host's copied beat would go stale
    whenever fleetflow stops reading the cloud (a sync interval longer than
    ``service_down_time``, a conductor stopped), and the whole fleet would read down.
    Nova's verdict comes first, so no host is suspect before Nova agrees it is down
    (Nova refuses to evacuate a host whose service it still reads up).
    """
    beats = {s["host"]: (s["updated_at"] if s["state"] != "up" else None)
             for s in services}
    changed = 0
    for name, beat in session.execute(sa.select(models.Host.name, models.Host.heartbeat_at)
                                      .where(models.Host.name.in_(beats))).all():
        if beat == beats[name]:
            continue
        session.execute(sa.update(models.Host).where(models.Host.name == name)
                        .values(heartbeat_at=beats[name]))
        changed += 1
    return changed


def _converge_traits(session: orm.Session, hosts: list[models.Host]) -> None:
    """Each host's provider traits: its own, the compute trait, the disabled one when
    it is not up (one read for all; a write only where they differ)."""
    uuids = [h.uuid for h in hosts]
    have: dict[str, set] = {u: set() for u in uuids}
    for uuid, trait in session.execute(sa.select(
            ProviderTrait.resource_provider_uuid, ProviderTrait.trait)
            .where(ProviderTrait.resource_provider_uuid.in_(uuids))):
        have[uuid].add(trait)
    for host in hosts:
        wanted = {t if providers.NAME_PATTERN.match(t) else placement_fleet.trait_name(t)
                  for t in host.traits or ()} | {placement_fleet.COMPUTE_TRAIT}
        if host.state != states.HOST_UP:
            wanted.add(DISABLED_TRAIT)
        if wanted != have[host.uuid]:
            generation = providers.get_provider(session, host.uuid).generation
            providers.set_traits(session, host.uuid, generation, wanted)


def _own_usage(session: orm.Session, names: list[str]) -> dict[str, dict[str, int]]:
    """``{host: {rc: used}}`` of fleetflow's own live instances there (their flavors)."""
    flavors = {f.id: f.resources for f in session.scalars(sa.select(models.Flavor))}
    used: dict[str, dict[str, int]] = {}
    for host, flavor_id in session.execute(sa.select(models.Instance.host,
                                                     models.Instance.flavor_id)
                                           .where(models.Instance.host.in_(names),
                                                  models.Instance.status.in_(OWN_STATUSES))):
        on_host = used.setdefault(host, {})
        for rc, amount in flavors.get(flavor_id, {}).items():
            on_host[rc] = on_host.get(rc, 0) + amount
    return used


def _room(session: orm.Session, uuids: list[str], external: set[str]) -> dict:
    """``{provider: {rc: what the ledger can still give}}``, external consumers not counted."""
    taken = {(rp, rc): int(n) for rp, rc, n in session.execute(
        sa.select(Allocation.resource_provider_uuid, Allocation.resource_class,
                  sa.func.sum(Allocation.used))
        .where(Allocation.resource_provider_uuid.in_(uuids),
               Allocation.consumer_uuid.not_in(external))
        .group_by(Allocation.resource_provider_uuid, Allocation.resource_class))}
    room: dict[str, dict[str, int]] = {}
    for inv in session.scalars(sa.select(Inventory).where(
            Inventory.resource_provider_uuid.in_(uuids))):
        key = (inv.resource_provider_uuid, inv.resource_class)
        room.setdefault(key[0], {})[key[1]] = providers.capacity(inv) - taken.get(key, 0)
    return room


def _write_external(session: orm.Session, view, synced: list[dict],
                    all_names: list[str]) -> int:
    """Replace every host's external consumer; returns the hosts that hold one."""
    consumers = {name: external_consumer(name) for name in all_names}
    own = _own_usage(session, [h["name"] for h in synced])
    room = _room(session, [h["uuid"] for h in synced], set(consumers.values()))
    wanted: dict[str, dict] = {}
    for host in synced:
        cloud = view.usages.get(view.providers.get(host["name"]), {})
        mine = own.get(host["name"], {})
        free = room.get(host["uuid"], {})
        amounts = {rc: min(used - mine.get(rc, 0), free.get(rc, 0))
                   for rc, used in sorted(cloud.items())}
        amounts = {rc: n for rc, n in amounts.items() if n > 0}
        wanted[consumers[host["name"]]] = {host["uuid"]: amounts} if amounts else {}
    held = allocation_reads.get_many(session, consumers.values())
    writes = [allocs.ConsumerWrite(consumer, wanted.get(consumer, {}), EXTERNAL_OWNER,
                                   EXTERNAL_OWNER, allocs.ANY_GENERATION, EXTERNAL_TYPE)
              for consumer in sorted(consumers.values())
              if {rp: entry["resources"] for rp, entry in
                  held[consumer]["allocations"].items()} != wanted.get(consumer, {})]
    if writes:
        allocs.replace_allocations(session, writes)
    return sum(1 for amounts in wanted.values() if amounts)


def apply(session: orm.Session, view, region: str) -> dict[str, int]:
    """Make fleetflow's rows mirror ``view`` in ``session``'s transaction; returns counts.

    ``hosts``: hosts synced (``up``/``down``/``disabled`` of them, and
    ``added``); ``vanished``: known hosts the cloud no longer reports;
    ``skipped``: services without a provider inventory yet; ``flavors``,
    ``images``; ``external``: hosts whose others' usage is held in the ledger.
    Idempotent: a second apply of the same view writes nothing.
    """
    hosts = host_records(view, region)
    known = list(session.scalars(sa.select(models.Host.name)))
    _make_room_for_inventory(session, hosts, {external_consumer(n) for n in known})
    flavors, images = flavor_records(view), image_records(view)
    _free_names(session, models.Flavor, flavors)
    _free_names(session, models.Image, images)
    added = fleet.load(session, fleet.Fleet(hosts=hosts, flavors=flavors, images=images))
    wanted = {h["name"]: (h["state"], h["state_reason"]) for h in hosts}
    # A known host whose service is reported without inventory still gets its state.
    for service in view.services:
        wanted.setdefault(service["host"], service_state(service))
    vanished = sorted(set(known) - wanted.keys())
    wanted.update({name: (states.HOST_DOWN, VANISHED_REASON) for name in vanished})
    _write_states(session, wanted, {s["host"] for s in view.services if s["state"] != "up"})
    write_heartbeats(session, view.services)
    session.flush()
    rows = list(session.scalars(sa.select(models.Host).where(models.Host.name.in_(wanted))
                                .execution_options(populate_existing=True)))
    _converge_traits(session, rows)
    external = _write_external(session, view, hosts, [r.name for r in rows])
    synced = {h["name"] for h in hosts}
    by_state = {s: sum(1 for r in rows if r.name in synced and r.state == s)
                for s in states.HOST_STATES}
    return {"hosts": len(hosts), "up": by_state[states.HOST_UP],
            "down": by_state[states.HOST_DOWN], "disabled": by_state[states.HOST_DISABLED],
            "maintenance": by_state[states.HOST_MAINTENANCE], "added": added["hosts"],
            "vanished": len(vanished), "skipped": len(view.services) - len(hosts),
            "flavors": len(flavors), "images": len(images), "external": external}
