"""What the audit reads: rows, placement allocations, the guests on the hosts and
the volumes on the storage backends.

Each source is read in bulk (one query per table, one RPC per host and per
backend, asked in parallel) so that a 10,000-host cloud audits in seconds,
not hours.
The readers return plain tuples and dicts; :mod:`fleetflow.services.audit.report`
compares them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.exceptions import FleetflowError
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence.models import (
    Evacuation,
    GroupMember,
    Host,
    Instance,
    Move,
    StorageBackend,
    VCluster,
    VClusterGrouping,
    VClusterMember,
    Volume,
)
from fleetflow.persistence.placement.fleet import COMPUTE_TRAIT
from fleetflow.persistence.placement.models import (
    Allocation,
    Consumer,
    ProviderTrait,
    ResourceProvider,
)
from fleetflow.scheduler.vcluster.check import Place

LOG = logging.getLogger(__name__)

Amounts = dict[str, dict[str, int]]  # {provider uuid: {resource class: used}}


@dataclasses.dataclass
class Rows:
    """The domain rows the audit needs, as light named tuples (no ORM objects)."""

    hosts: dict[str, str]  # host name -> provider uuid
    backends: dict[str, str]  # storage backend name -> provider uuid
    instances: dict[str, sa.Row]  # id -> (id, status, host, task_state)
    # id -> (id, status, backend, instance_id, size_gb, vcluster_id)
    volumes: dict[str, sa.Row]
    members: list[sa.Row]  # (group_id, instance_id, host)
    # Evacuations: moves in flight by instance, the migration consumers they
    # explain, instances an active evacuation holds, rebuilt-away copies.
    moving: dict[str, sa.Row] = dataclasses.field(default_factory=dict)
    migrations: set[str] = dataclasses.field(default_factory=set)
    held: set[str] = dataclasses.field(default_factory=set)
    evacuated: set[tuple[str, str]] = dataclasses.field(default_factory=set)  # (host, id)
    down_hosts: set[str] = dataclasses.field(default_factory=set)
    # Where hosts and backends stand (what reaches what, what a grouping spans).
    host_places: dict[str, Place] = dataclasses.field(default_factory=dict)
    backend_places: dict[str, Place] = dataclasses.field(default_factory=dict)
    # Virtual clusters: every one's status; the groupings and members of the ACTIVE ones.
    vclusters: dict[str, str] = dataclasses.field(default_factory=dict)
    groupings: list[sa.Row] = dataclasses.field(default_factory=list)
    vcluster_members: list[sa.Row] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class PlacementView:
    """Every consumer's allocations, and which providers are compute hosts."""

    allocations: dict[str, Amounts]  # consumer uuid -> amounts
    consumer_types: dict[str, str]  # consumer uuid -> consumer_type ("unknown" if not known)
    compute_providers: set[str]
    # Every provider that exists (None: not read, nothing is judged by it).
    providers: set[str] | None = None


@dataclasses.dataclass
class Guests:
    """What the asked hosts answered: their guests, or why they did not answer."""

    by_host: dict[str, list[dict]]
    unreachable: dict[str, str]  # host name -> reason


@dataclasses.dataclass
class BackendVolumes:
    """What the backends listed through a host reaching them, or why they could not."""

    by_backend: dict[str, list[dict]]
    unreachable: dict[str, tuple[str | None, str]]  # backend -> (host tried, reason)


def read_rows(database, service_down_time: float = 60) -> Rows:
    """One SELECT per table, only the columns compared."""
    with database.session() as session:
        host_rows = list(session.scalars(sa.select(Host)))
        hosts = {h.name: h.uuid for h in host_rows}
        down = {h.name for h in host_rows
                if evac_rows.effective_host_state(h, service_down_time) == states.HOST_DOWN}
        backend_rows = session.execute(sa.select(
            StorageBackend.name, StorageBackend.uuid, StorageBackend.scope,
            StorageBackend.host_name, StorageBackend.region, StorageBackend.zone,
            StorageBackend.rack)).all()
        instances = {row.id: row for row in session.execute(sa.select(
            Instance.id, Instance.status, Instance.host, Instance.task_state))}
        volumes = {row.id: row for row in session.execute(sa.select(
            Volume.id, Volume.status, Volume.backend, Volume.instance_id, Volume.size_gb,
            Volume.vcluster_id))}
        members = list(session.execute(sa.select(
            GroupMember.group_id, GroupMember.instance_id, GroupMember.host)))
        moves = list(session.execute(sa.select(
            Move.instance_id, Move.status, Move.step, Move.source, Move.destination,
            Move.mode, Move.migration_id, Evacuation.status.label("evacuation_status"))
            .join(Evacuation, Evacuation.id == Move.evacuation_id)))
        vclusters = dict(session.execute(sa.select(VCluster.id, VCluster.status)).all())
        groupings = list(session.execute(
            sa.select(VClusterGrouping.vcluster_id, VClusterGrouping.name,
                      VClusterGrouping.rule, VClusterGrouping.scope, VClusterGrouping.members)
            .join(VCluster, VCluster.id == VClusterGrouping.vcluster_id)
            .where(VCluster.status == states.ACTIVE)
            .order_by(VClusterGrouping.vcluster_id, VClusterGrouping.position)))
        vcluster_members = list(session.execute(
            sa.select(VClusterMember.vcluster_id, VClusterMember.name, VClusterMember.kind,
                      VClusterMember.resource_id)
            .join(VCluster, VCluster.id == VClusterMember.vcluster_id)
            .where(VCluster.status == states.ACTIVE)))
    active = states.EVACUATION_ACTIVE
    # In flight: between the claim (the fast path's included, whose move still
    # waits for its lane) and the confirm.
    in_flight = [m for m in moves if m.status == states.MOVING
                 or (m.status == states.PENDING and m.step == "claimed")]
    return Rows(
        hosts, {b.name: b.uuid for b in backend_rows}, instances, volumes, members,
        moving={m.instance_id: m for m in in_flight},
        migrations={m.migration_id for m in in_flight},
        held={m.instance_id for m in moves if m.evacuation_status in active
              and m.status in (states.PENDING, states.MOVING, states.FAILED)},
        evacuated={(m.source, m.instance_id) for m in moves
                   if m.status == states.DONE and m.mode == states.MODE_REBUILD},
        down_hosts=down,
        host_places={h.name: Place(h.name, h.name, h.region, h.zone, h.rack)
                     for h in host_rows},
        backend_places={b.name: Place(b.name, b.host_name if b.scope == "host" else None,
                                      b.region, b.zone, b.rack) for b in backend_rows},
        vclusters=vclusters, groupings=groupings, vcluster_members=vcluster_members)


def read_placement(placement_client, database=None) -> PlacementView:
    """Every allocation of the placement the client talks to.

    The local store is read with two queries. A remote Placement has no
    "all allocations" call, so it is asked per provider, as its own tools do.
    """
    store = getattr(placement_client, "store", None)
    if store is not None:
        return _read_local(store.database)
    if hasattr(placement_client, "_call"):
        return _read_http(placement_client)
    if database is not None:
        return _read_local(database)
    raise TypeError(f"cannot list the allocations of {type(placement_client).__name__}")


def _read_local(database) -> PlacementView:
    allocations: dict[str, Amounts] = defaultdict(lambda: defaultdict(dict))
    types: dict[str, str] = {}
    with database.session() as session:
        rows = session.execute(
            sa.select(Allocation.consumer_uuid, Allocation.resource_provider_uuid,
                      Allocation.resource_class, Allocation.used, Consumer.consumer_type)
            .join(Consumer, Consumer.uuid == Allocation.consumer_uuid))
        for consumer, rp, rc, used, ctype in rows:
            allocations[consumer][rp][rc] = used
            types[consumer] = ctype or "unknown"
        compute = set(session.scalars(sa.select(ProviderTrait.resource_provider_uuid)
                                      .where(ProviderTrait.trait == COMPUTE_TRAIT)))
        providers = set(session.scalars(sa.select(ResourceProvider.uuid)))
    return PlacementView({c: dict(a) for c, a in allocations.items()}, types, compute,
                         providers)


def _read_http(client, workers: int = 16) -> PlacementView:
    # NOTE: Placement before 1.38 does not say a consumer's type, so remote
    # consumers are all "unknown": migration consumers then look leaked.
    providers = client._call("GET", "/resource_providers").json()["resource_providers"]
    compute = {rp["uuid"] for rp in client._call(
        "GET", "/resource_providers", params={"required": COMPUTE_TRAIT}).json()[
        "resource_providers"]}

    def of_provider(rp_uuid):
        body = client._call("GET", f"/resource_providers/{rp_uuid}/allocations").json()
        return rp_uuid, body.get("allocations") or {}

    allocations: dict[str, Amounts] = defaultdict(dict)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for rp_uuid, held in pool.map(of_provider, [rp["uuid"] for rp in providers]):
            for consumer, entry in held.items():
                allocations[consumer][rp_uuid] = dict(entry["resources"])
    return PlacementView(dict(allocations), {c: "unknown" for c in allocations}, compute,
                         {rp["uuid"] for rp in providers})


def ask_hosts(compute_api, hosts, workers: int = 16, timeout: float | None = None) -> Guests:
    """``list_instances`` of every host, in parallel.

    A host that does not answer (dead, timed out, not served) is reported as
    unreachable with the error: it is never taken for an empty host.
    """
    def ask(host):
        try:
            return host, compute_api.list_instances(host, timeout=timeout), None
        except FleetflowError as exc:
            return host, None, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - any transport failure means "unknown"
            LOG.warning("audit: asking host %s failed: %s", host, exc)
            return host, None, f"{type(exc).__name__}: {exc}"

    by_host: dict[str, list[dict]] = {}
    unreachable: dict[str, str] = {}
    hosts = list(hosts)
    if not hosts:
        return Guests(by_host, unreachable)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
        for host, guests, error in pool.map(ask, hosts):
            if error is None:
                by_host[host] = list(guests or [])
            else:
                unreachable[host] = error
    return Guests(by_host, unreachable)


def routes(rows: Rows, answered) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per backend: the hosts that answered and may carry its calls (by name), and
    every host reaching it that is not down (asked or not).

    As the flows route storage calls (``storage_routes``): a host-local
    backend through its own host, a rack backend through any host of its rack.
    """
    by_rack: dict[tuple, list[str]] = defaultdict(list)
    for name, place in rows.host_places.items():
        if name not in rows.down_hosts:
            by_rack[(place.region, place.zone, place.rack)].append(name)
    living, carrying = {}, {}
    for backend, place in rows.backend_places.items():
        if place.host is not None:
            reach = [h for h in (place.host,)
                     if h in rows.host_places and h not in rows.down_hosts]
        else:
            reach = by_rack.get((place.region, place.zone, place.rack), [])
        living[backend] = sorted(reach)
        carrying[backend] = [h for h in living[backend] if h in answered]
    return carrying, living


def ask_backends(compute_api, rows: Rows, guests: Guests, asked, workers: int = 16,
                 timeout: float | None = None, tries: int = 3) -> BackendVolumes:
    """``list_volumes`` of every backend a living asked host reaches, in parallel.

    Only hosts that just answered carry the calls (no time lost on a dead
    one); a backend is asked through its first such host, then the next
    ones (at most ``tries``). A backend that living asked hosts reach but
    none of them answered for is unreachable; one that no living host
    reaches (a down host's own disk), or that only hosts not asked reach,
    is left out, as a down or unasked host is. A compute side that cannot
    list volumes leaves every backend out.
    """
    listing = getattr(compute_api, "list_volumes", None)
    if listing is None:
        return BackendVolumes({}, {})
    carrying, living = routes(rows, guests.by_host)
    asked = set(asked)

    def ask(backend):
        error, host = "no host reaching it answered", None
        for host in carrying[backend][:tries]:
            try:
                return backend, listing(host, backend, timeout=timeout), host, None
            except Exception as exc:  # noqa: BLE001 - any failure means "unknown"
                LOG.warning("audit: listing backend %s through %s failed: %s", backend,
                            host, exc)
                error = f"{type(exc).__name__}: {exc}"
        return backend, None, host, error

    wanted = [b for b in sorted(rows.backend_places) if asked.intersection(living[b])]
    by_backend: dict[str, list[dict]] = {}
    unreachable: dict[str, tuple[str | None, str]] = {}
    if not wanted:
        return BackendVolumes(by_backend, unreachable)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(wanted)))) as pool:
        for backend, volumes, host, error in pool.map(ask, wanted):
            if error is None:
                by_backend[backend] = list(volumes or [])
            else:
                unreachable[backend] = (host, error)
    return BackendVolumes(by_backend, unreachable)
