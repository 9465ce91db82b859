"""Which hosts are dead: suspect by heartbeat, confirmed by ping, held by the storm guard.

A host is *suspect* once its heartbeat is older than ``[compute]
service_down_time`` (on OpenStack the heartbeat is Nova's, read each pass by
:func:`cloud_heartbeats`), and *dead* once it has also failed every ping for
``[recovery] confirm_seconds``. One that answers again (or heartbeats again)
before it is fenced is closed as a flap. The storm guard holds every dead
host of a zone (or of the fleet) where more than ``[recovery]
max_dead_fraction`` of the hosts look dead at once, like Kubernetes' node
lifecycle controller: that is more likely the monitor's own network.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import cloud_sync, fences
from fleetflow.persistence import recoveries as rows
from fleetflow.persistence.models import Host

LOG = logging.getLogger(__name__)

# A dead host must not hold a pass for a full RPC timeout.
PING_TIMEOUT = 5.0
PING_WORKERS = 16


def cloud_heartbeats(database, compute, fence: dict | None) -> None:
    """``[cloud] driver = openstack``: the hosts' heartbeats from one ``os-services``
    listing, the beats Nova's servicegroup judges by (``cloud_sync.write_heartbeats``).

    Read every pass, not left to the periodic sync: detection must not wait for a
    sync interval. A listing that fails fails the pass: nothing is decided on a
    view of the cloud that could not be read.
    """
    services = compute.compute_services()
    with database.session() as session:
        fences.check(session, fence)
        cloud_sync.write_heartbeats(session, services)


def open_suspects(database, conf, fence: dict | None, now: dt.datetime) -> list[str]:
    """A SUSPECT recovery for every silent ``up`` host without an open one."""
    with database.session() as session:
        fences.check(session, fence)
        stale = rows.stale_hosts(session, conf.compute.service_down_time, now)
        opened = rows.open_suspects(session, stale, now)
    for name in opened:
        LOG.warning("host %s is suspect: no heartbeat for %s s; pinging it", name,
                    conf.compute.service_down_time)
    return opened


def answering(compute, names: list[str], timeout: float) -> set[str]:
    """The hosts among ``names`` that answer a ping, asked in parallel."""
    from fleetflow.flows.evacuate.tasks import answers

    if compute is None or not names:
        return set()
    with ThreadPoolExecutor(min(PING_WORKERS, len(names))) as pool:
        found = pool.map(lambda name: (name, answers(compute, name, timeout)), names)
        return {name for name, ok in found if ok}


def confirm(database, conf, compute, fence: dict | None, now: dt.datetime) -> None:
    """Ping the suspects: dead after ``confirm_seconds`` of silence, or a flap."""
    watched = (rows.SUSPECT, rows.DEAD, rows.HELD)
    with database.read_session() as session:
        names = [r.host for r in rows.open_recoveries(session, watched)]
    if not names:
        return
    timeout = min(PING_TIMEOUT, conf.messaging.rpc_timeout)
    alive = answering(compute, names, timeout)
    fresh_after = now - dt.timedelta(seconds=conf.compute.service_down_time)
    with database.session() as session:
        fences.check(session, fence)
        hosts = {h.name: h for h in session.scalars(sa.select(Host).where(
            Host.name.in_(names)))}
        for recovery in rows.open_recoveries(session, watched):
            host = hosts.get(recovery.host)
            if host is None or host.state != states.HOST_UP or host.evacuation_id:
                why = ("the host left the fleet" if host is None else
                       f"the host was set {host.state} or evacuated by an operator")
                rows.close(recovery, rows.CLEARED, why)
                continue
            back = host.heartbeat_at is not None and host.heartbeat_at >= fresh_after
            if recovery.host in alive or back:
                silent = (now - recovery.suspect_at).total_seconds()
                rows.close(recovery, rows.FLAPPED,
                           f"answered again {silent:.1f} s after it went silent")
                LOG.warning("host %s flapped: it answers again; nothing moved",
                            recovery.host)
                continue
            if recovery.status != rows.SUSPECT:
                continue
            if recovery.silent_since is None:
                recovery.silent_since = now
            silent = (now - recovery.silent_since).total_seconds()
            if silent >= conf.recovery.confirm_seconds:
                recovery.status, recovery.dead_at = rows.DEAD, now
                rows.event(recovery, "dead", f"no ping answered for {silent:.1f} s", now)
                LOG.warning("host %s is dead: no heartbeat, no answer for %.1f s",
                            recovery.host, silent)


def storm(session, conf, now: dt.datetime) -> tuple[dict[str, tuple[int, int]], bool]:
    """``({zone: (looking dead, hosts)} of the zones over the limit, fleet over it)``."""
    totals = Counter(session.scalars(sa.select(Host.zone)))
    dead = Counter(h.zone for h in rows.stale_hosts(session, conf.compute.service_down_time,
                                                    now))
    limit = conf.recovery.max_dead_fraction
    zones = {zone: (count, totals[zone]) for zone, count in dead.items()
             if totals[zone] and count / totals[zone] > limit}
    fleet = sum(totals.values())
    return zones, bool(fleet and sum(dead.values()) / fleet > limit)


def guard(database, conf, fence: dict | None, now: dt.datetime) -> list[str]:
    """Hold the dead hosts of a storm, release them once it is over; the held hosts."""
    held = []
    with database.session() as session:
        fences.check(session, fence)
        candidates = rows.open_recoveries(session, (rows.DEAD, rows.HELD))
        if not candidates:
            return held
        zones, fleet = storm(session, conf, now)
        limit = conf.recovery.max_dead_fraction
        for recovery in candidates:
            if fleet or recovery.zone in zones:
                held.append(recovery.host)
                if recovery.status == rows.HELD:
                    continue
                if recovery.zone in zones:
                    count, total = zones[recovery.zone]
                    why = (f"{count} of {total} hosts of zone {recovery.zone} look dead "
                           f"(more than {limit:.0%})")
                else:
                    why = f"more than {limit:.0%} of the fleet's hosts look dead"
                recovery.status = rows.HELD
                recovery.detail = f"storm guard: {why}"[:255]
                rows.event(recovery, "storm-guard", why + ": nothing moves until fewer "
                           "do or an operator acts", now)
                LOG.error("recovery storm guard: %s; host %s is NOT evacuated (the "
                          "monitor's own network is the likelier fault): waiting for "
                          "an operator", why, recovery.host)
            elif recovery.status == rows.HELD:
                recovery.status, recovery.detail = rows.DEAD, None
                rows.event(recovery, "storm-over", "few enough hosts look dead", now)
    return held
