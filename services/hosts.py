"""Hosts as operators steer them: state changes kept in step with placement, simulation.

The API calls :class:`HostOps` (service ``hosts``). A host's state is what
the operator set, read through its heartbeat: an ``up`` host whose agent has
been silent for ``[compute] service_down_time`` reads ``down``
(:func:`persistence.evacuations.effective_host_state`); lists filter on that
effective state too (:func:`effective_state_clause`).

Placement is told as Nova tells it: a host that is not ``up`` carries the
``COMPUTE_STATUS_DISABLED`` trait on its resource provider, so allocation
candidates that forbid the trait skip it; an ``up`` host does not.
"""

from __future__ import annotations

import datetime as dt
import logging

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.common import states
from fleetflow.common.config import openstack_mode
from fleetflow.common.exceptions import Conflict, FleetflowError, InvalidInput, NotFound
from fleetflow.compute.exceptions import HostDead, OutcomeUnknown
from fleetflow.persistence import evacuations as evacuation_rows
from fleetflow.persistence import paging
from fleetflow.persistence.models import Host, Instance, StorageBackend, utcnow

LOG = logging.getLogger(__name__)

DISABLED_TRAIT = "COMPUTE_STATUS_DISABLED"
# Instances in these statuses no longer occupy their host.
GONE = (states.DELETED, states.REVERTED)
# A provider generation race is lost only to another writer of the same
# provider's traits; a few fresh reads settle it.
TRAIT_ATTEMPTS = 5
# Asking whether a host is simulated must not wait a full RPC timeout on a
# dead host that hangs its calls.
PING_TIMEOUT = 5.0


class SimulatedOnly(Conflict):
    """Faults are injected only into fleetflow's simulated cloud."""

    code = "SIMULATED_ONLY"


class NotSimulated(NotFound):
    """The host is served by a real hypervisor: faults cannot be injected into it."""

    code = "NOT_SIMULATED"


class ComputeUnavailable(FleetflowError):
    """No RPC client of the compute hosts is configured in this process."""

    code = "fleetflow.compute_unavailable"
    status = 503


def effective_state_clause(state: str, service_down_time: float,
                           now: dt.datetime | None = None):
    """A WHERE clause of the hosts whose effective state is ``state``."""
    cutoff = (now or utcnow()) - dt.timedelta(seconds=service_down_time)
    stale = sa.and_(Host.state == states.HOST_UP, Host.heartbeat_at.is_not(None),
                    Host.heartbeat_at < cutoff)
    if state == states.HOST_DOWN:
        return sa.or_(Host.state == states.HOST_DOWN, stale)
    if state == states.HOST_UP:
        return sa.and_(Host.state == states.HOST_UP,
                       sa.or_(Host.heartbeat_at.is_(None), Host.heartbeat_at >= cutoff))
    return Host.state == state


def instance_counts(session: orm.Session, names: list[str]) -> dict[str, int]:
    """Instances living on each named host, with one query."""
    if not names:
        return {}
    return dict(session.execute(
        sa.select(Instance.host, sa.func.count())
        .where(Instance.host.in_(names), Instance.status.not_in(GONE))
        .group_by(Instance.host)).all())


def capacities(session: orm.Session, uuids: list[str]) -> dict[str, dict[str, dict]]:
    """``{provider uuid: {resource class: {"used", "total", "free"}}}`` from placement.

    ``total`` is what placement lets be allocated, ``(total - reserved) *
    allocation_ratio``, so used never exceeds it; two queries for any number of
    hosts.
    """
    from fleetflow.persistence.placement.allocations import usages_by_provider
    from fleetflow.persistence.placement.models import Inventory

    if not uuids:
        return {}
    used = usages_by_provider(session, uuids)
    found: dict[str, dict[str, dict]] = {}
    for inventory in session.scalars(sa.select(Inventory).where(
            Inventory.resource_provider_uuid.in_(uuids))):
        provider = inventory.resource_provider_uuid
        total = int((inventory.total - inventory.reserved) * inventory.allocation_ratio)
        taken = used.get(provider, {}).get(inventory.resource_class, 0)
        found.setdefault(provider, {})[inventory.resource_class] = {
            "used": taken, "total": total, "free": max(total - taken, 0)}
    return found


def views(session: orm.Session, hosts: list[Host], service_down_time: float,
          now: dt.datetime | None = None) -> list[dict]:
    """The hosts as the API shows them (effective state, instance count, capacity)."""
    now = now or utcnow()
    counts = instance_counts(session, [h.name for h in hosts])
    capacity = capacities(session, [h.uuid for h in hosts])
    return [{"uuid": h.uuid, "name": h.name, "capacity": capacity.get(h.uuid, {}),
             "state": evacuation_rows.effective_host_state(h, service_down_time, now),
             "reason": h.state_reason, "topology": h.topology, "inventory": h.inventory,
             "capabilities": h.capabilities, "traits": h.traits,
             "compute_agent": h.compute_agent, "instances": counts.get(h.name, 0),
             "evacuation_id": h.evacuation_id, "heartbeat_at": h.heartbeat_at,
             "created_at": h.created_at, "updated_at": h.updated_at}
            for h in hosts]


def place_names(database) -> frozenset[str]:
    """Every name of a place of the fleet: hosts, racks, zones, regions, storage backends.

    The API hides them from free text (faults, explanations) for callers who may
    not see where things are.
    """
    names: set[str] = set()
    with database.read_session() as session:
        for model in (Host, StorageBackend):
            for row in session.execute(sa.select(model.name, model.rack, model.zone,
                                                 model.region)):
                names.update(name for name in row if name)
    return frozenset(names)


def get_host(session: orm.Session, name: str) -> Host:
    host = session.scalars(sa.select(Host).where(Host.name == name)).first()
    if host is None:
        raise NotFound(f"Host {name} does not exist.", host=name)
    return host


def sync_disabled_trait(placement_store, provider_uuid: str, disabled: bool) -> bool:
    """Add or drop COMPUTE_STATUS_DISABLED on a provider; False when it has none.

    The host's other traits are kept: only this one is owned here.
    """
    from fleetflow.persistence.placement import errors as placement_errors

    for attempt in range(TRAIT_ATTEMPTS):
        try:
            generation, traits = placement_store.get_traits(provider_uuid)
        except placement_errors.ProviderNotFound:
            return False
        wanted = set(traits) | {DISABLED_TRAIT} if disabled else set(traits) - {DISABLED_TRAIT}
        if wanted == set(traits):
            return True
        try:
            placement_store.set_traits(provider_uuid, generation, sorted(wanted))
            return True
        except placement_errors.ProviderGenerationConflict:
            if attempt == TRAIT_ATTEMPTS - 1:
                raise
            LOG.debug("traits of provider %s changed under us; reading again",
                      provider_uuid)
    return True  # pragma: no cover - the loop returns or raises


class HostOps:
    """Entry points of the admin host routes; one per process (API service ``hosts``).

    ``placement_store`` (persistence.placement.store.PlacementStore) keeps the
    disabled trait in step; ``compute`` (compute.rpcapi.ComputeAPI) reaches
    the hosts for :meth:`simulate`. Either may be None where not deployed.
    """

    def __init__(self, conf, database, placement_store=None, compute=None):
        self.conf = conf
        self.database = database
        self.placement_store = placement_store
        self.compute = compute

    @property
    def service_down_time(self) -> float:
        return self.conf.compute.service_down_time

    def list_page(self, *, limit: int, marker: str | None = None, state: str | None = None,
                  region: str | None = None, zone: str | None = None,
                  rack: str | None = None) -> tuple[list[dict], bool]:
        """``(hosts, more)``: one page of host views, sorted by name.

        Filters combine (AND); ``state`` is the effective state. The marker
        must name a host of the fleet (InvalidInput naming ``marker``).
        """
        now = utcnow()
        scope = stmt = sa.select(Host)
        if state is not None:
            stmt = stmt.where(effective_state_clause(state, self.service_down_time, now))
        for column, value in (("region", region), ("zone", zone), ("rack", rack)):
            if value is not None:
                stmt = stmt.where(getattr(Host, column) == value)
        with self.database.session() as session:
            hosts, more = paging.keyset_page(session, stmt, Host.name, limit, marker, "host",
                                             scope)
            return views(session, hosts, self.service_down_time, now), more

    def show(self, name: str) -> dict:
        with self.database.session() as session:
            return views(session, [get_host(session, name)], self.service_down_time)[0]

    def set_state(self, name: str, state: str, reason: str | None = None,
                  user_id: str | None = None) -> dict:
        """Set the operator's state of a host now; returns its view.

        ``down`` takes effect at once, heartbeat or not (an operator's forced
        down: a dead host can be rebuilt elsewhere without waiting for its
        heartbeat to go stale). A host held by an evacuation cannot be brought
        back ``up`` (EvacuationInProgress); the same state again is accepted.
        """
        if state not in states.HOST_STATES:
            raise InvalidInput(f"Invalid body field 'host.state': must be one of "
                               f"{', '.join(states.HOST_STATES)}.", field="host.state")
        with self.database.session() as session:
            host = get_host(session, name)
            previous = host.state
            query = sa.update(Host).where(Host.name == name)
            if state == states.HOST_UP:
                # NOTE: conditional, so an evacuation taking the host between
                # the read above and this write still wins.
                query = query.where(sa.or_(Host.evacuation_id.is_(None),
                                           Host.state == states.HOST_UP))
            changed = session.execute(query.values(state=state, state_reason=reason,
                                                   updated_at=utcnow())).rowcount
            if not changed:
                holder = session.execute(sa.select(Host.evacuation_id).where(
                    Host.name == name)).scalar()
                raise evacuation_rows.EvacuationInProgress(
                    f"host {name} is held by evacuation {holder}; it can be set up once "
                    "the evacuation ends (or is reverted)", host=name, evacuation_id=holder)
            provider_uuid = host.uuid
        # NOTE: after the commit, and every time (the same state included): the
        # placement store writes in its own transaction, and repeating the
        # request is how an operator repairs a trait a failure left behind.
        self._sync_trait(name, provider_uuid, state)
        if openstack_mode(self.conf) and self.compute is not None:
            # The cloud's service is the truth the next sync reads: say it there too.
            self.compute.set_service_state(name, state, reason or f"set {state} by {user_id}")
        LOG.info("Host %s state %s -> %s by %s (%s)", name, previous, state, user_id, reason)
        return self.show(name)

    def sync_placement(self, name: str, state: str) -> None:
        """Put ``name``'s disabled trait in step with ``state``, written by someone else.

        An evacuation fences its hosts itself (EvacuationOps' ``on_host_state``).
        """
        with self.database.session() as session:
            provider_uuid = get_host(session, name).uuid
        self._sync_trait(name, provider_uuid, state)

    def _sync_trait(self, name: str, provider_uuid: str, state: str) -> None:
        if self.placement_store is None:
            return
        if not sync_disabled_trait(self.placement_store, provider_uuid,
                                   disabled=state != states.HOST_UP):
            LOG.warning("host %s has no resource provider %s: no trait to keep in step",
                        name, provider_uuid)

    def simulate(self, name: str, dead: bool) -> dict:
        """Kill or revive a simulated host (fault injection); returns its view.

        NotSimulated (404) when the host's agent says it runs a real
        hypervisor. The operator's state is left alone: a revived host that
        was fenced stays ``down`` until an operator sets it ``up``.
        """
        with self.database.session() as session:
            get_host(session, name)
        if openstack_mode(self.conf):
            raise SimulatedOnly(f"host {name} is one of the cloud's ([cloud] driver = "
                                "openstack): only simulated hosts can be killed", host=name)
        if self.compute is None:
            raise ComputeUnavailable("no compute RPC client is configured in this API "
                                     "process", host=name)
        if not self._simulated(name):
            raise NotSimulated(f"host {name} is not simulated: its agent runs a real "
                               "hypervisor", host=name)
        faults = self.compute.set_faults(name, dead=bool(dead))
        LOG.info("Host %s simulated %s", name, "dead" if dead else "alive")
        view = self.show(name)
        view["faults"] = faults
        return view

    def _simulated(self, name: str) -> bool:
        timeout = min(PING_TIMEOUT, self.conf.messaging.rpc_timeout)
        try:
            answer = self.compute.ping(name, timeout=timeout)
        except (HostDead, OutcomeUnknown):
            # Only a simulated host can be dead by injection; one that hangs its
            # calls is found out by set_faults, which the agent answers even then.
            return True
        return (answer or {}).get("simulated", True) is not False

