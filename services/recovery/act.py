"""Acting on dead hosts: fence them, start their evacuation, follow it to its end.

Each step is written before the next one starts, so a monitor taking over
after a crash goes on from the rows:

1. fence (one transaction): the recoveries FENCED with the id of the
   evacuation to come, the hosts ``down`` with the reason ``automatic``; then
   placement hears of it (COMPUTE_STATUS_DISABLED);
2. evacuate through the operators' path (EvacuationOps, mode rebuild, reason
   "automatic recovery") with that id: created once, found again by a repeat;
3. follow: the evacuation's end is the recovery's outcome.

Dead hosts of one zone ready at once (a rack) are one evacuation: one
placement pass. At most ``[recovery] max_concurrent`` hosts are FENCED or
EVACUATING at once; the rest wait DEAD.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict

import sqlalchemy as sa

from fleetflow.common import crash_points, states
from fleetflow.common.exceptions import FleetflowError
from fleetflow.persistence import evacuations as evacuation_rows
from fleetflow.persistence import fences
from fleetflow.persistence import recoveries as rows
from fleetflow.persistence.models import Evacuation, Host, utcnow
from fleetflow.services.recovery import policy

LOG = logging.getLogger(__name__)

REASON = "automatic recovery"
FENCE_REASON = "automatic"
USER = "recovery"
# The crash point between the fence's commit and the evacuation's creation.
CRASH_ATOM = "recovery"
SETTLED = (states.DONE, states.PARTIAL, states.FAILED, states.REVERTED)


def ready_batches(database, conf, now: dt.datetime) -> list[list[str]]:
    """The dead hosts to fence now, one list per evacuation.

    A zone's dead hosts wait while another host of the zone that went silent
    with them (within a heartbeat and a pass) is not confirmed yet: hosts
    dying together are recovered together.
    """
    window = dt.timedelta(seconds=conf.compute.heartbeat_interval + conf.recovery.interval)
    with database.read_session() as session:
        if rows.paused(session):
            return []
        busy = len(rows.open_recoveries(session, (rows.FENCED, rows.EVACUATING)))
        dead = rows.open_recoveries(session, (rows.DEAD,))
        suspects = rows.open_recoveries(session, (rows.SUSPECT,))
    room = conf.recovery.max_concurrent - busy
    zones: dict[str | None, list] = defaultdict(list)
    for recovery in dead:
        zones[recovery.zone].append(recovery)
    batches = []
    for zone, found in zones.items():
        latest = max(r.suspect_at for r in found)
        if any(s.zone == zone and s.suspect_at <= latest + window for s in suspects):
            continue
        if room <= 0:
            break
        batch = [r.host for r in found[:room]]
        room -= len(batch)
        batches.append(batch)
    return batches


def fence(database, hosts_ops, fence_token: dict | None, names: list[str]) -> str | None:
    """Fence the DEAD recoveries of ``names``; the evacuation id chosen, or None."""
    evacuation_id = evacuation_rows.new_evacuation_id()
    fenced = []
    with database.session() as session:
        fences.check(session, fence_token)
        for recovery in rows.open_recoveries(session, (rows.DEAD,)):
            if recovery.host not in names:
                continue
            # Conditional: an operator who set the host or evacuated it first wins.
            changed = session.execute(sa.update(Host).where(
                Host.name == recovery.host, Host.state == states.HOST_UP,
                Host.evacuation_id.is_(None)).values(
                state=states.HOST_DOWN, state_reason=FENCE_REASON,
                updated_at=utcnow())).rowcount
            if not changed:
                rows.close(recovery, rows.CLEARED, "an operator changed the host first")
                continue
            recovery.status, recovery.fenced_at = rows.FENCED, utcnow()
            recovery.evacuation_id = evacuation_id
            rows.event(recovery, "fenced", f"state down, reason {FENCE_REASON}; evacuation "
                       f"{evacuation_id} to follow")
            fenced.append(recovery.host)
    for name in fenced:
        LOG.warning("host %s fenced (down, reason %s): evacuation %s follows", name,
                    FENCE_REASON, evacuation_id)
        if hosts_ops is not None:
            try:
                hosts_ops.sync_placement(name, states.HOST_DOWN)
            except FleetflowError as exc:  # the state is written; the trait can follow
                LOG.warning("host %s: could not mark its provider down: %s", name, exc)
    return evacuation_id if fenced else None


def _targets(database, conf, evacuations, hosts_ops, names: list[str], zone: str | None,
             instances: list[str]) -> tuple[list[str] | None, str | None]:
    """``(target_hosts, what the timeline says of them)`` by ``[recovery] where``."""
    from fleetflow.services.evacuations import EvacuationRequest

    where = conf.recovery.where
    with database.read_session() as session:
        if where == "zone":
            found = policy.zone_hosts(session, zone, names)
            return (found or None), f"hosts of zone {zone}"
        if where != "reserve":
            return None, None
        reserve = policy.reserve_hosts(session, conf)
    if not reserve:
        return None, f"reserve pool {conf.recovery.reserve_pool} is empty: any host"
    for host in reserve:
        if host.state != states.HOST_UP and hosts_ops is not None:
            hosts_ops.set_state(host.name, states.HOST_UP, reason="reserve pool: recovery",
                                user_id=USER)
    pool = [h.name for h in reserve]
    probe = EvacuationRequest(hosts=names, mode=states.MODE_REBUILD, target_hosts=pool,
                              instances=instances)
    if evacuations.dry_run(probe)["fits"]:
        return pool, f"reserve pool {conf.recovery.reserve_pool}: {', '.join(pool)}"
    return None, f"reserve pool {conf.recovery.reserve_pool} too small: any host"


def evacuate(database, conf, evacuations, hosts_ops, fence_token: dict | None) -> None:
    """Create the evacuation of every FENCED recovery (after a fence, or a crash)."""
    from fleetflow.flows.evacuate.tasks import HostAlive
    from fleetflow.services.evacuations import EvacuationRequest

    with database.session() as session:
        fences.check(session, fence_token)
        groups: dict[str, list] = defaultdict(list)
        for recovery in rows.open_recoveries(session, (rows.FENCED,)):
            why = operator_took(session, recovery)
            if why:
                rows.close(recovery, rows.CLEARED, why)
                LOG.warning("host %s: %s; its recovery stops", recovery.host, why)
                continue
            groups[recovery.evacuation_id].append((recovery.host, recovery.zone))
    for evacuation_id, found in groups.items():
        names = [name for name, _zone in found]
        with database.read_session() as session:
            instances, staying = policy.servers(session, conf, names)
        targets, where = _targets(database, conf, evacuations, hosts_ops, names, found[0][1],
                                  instances)
        request = EvacuationRequest(
            hosts=names, mode=states.MODE_REBUILD, on_error=conf.recovery.on_error,
            max_parallel=conf.recovery.max_parallel, target_hosts=targets, reason=REASON,
            user_id=USER, evacuation_id=evacuation_id, instances=instances)
        try:
            evacuations.evacuate(request)
        except HostAlive as exc:
            _close_all(database, fence_token, evacuation_id, rows.ABORTED, str(exc))
            LOG.error("recovery of %s aborted, the hosts stay fenced: %s", names, exc)
            continue
        except evacuation_rows.EvacuationInProgress as exc:
            _close_all(database, fence_token, evacuation_id, rows.CLEARED, str(exc))
            continue
        except FleetflowError as exc:
            LOG.warning("evacuation %s of %s not created yet (%s): next pass",
                        evacuation_id, names, exc)
            continue
        detail = f"{len(instances)} servers"
        if staying:
            detail += f", {len(staying)} left: " + ", ".join(
                f"{uuid} ({why})" for uuid, why in sorted(staying.items()))
        if where:
            detail += f"; to {where}"
        with database.session() as session:
            fences.check(session, fence_token)
            for recovery in rows.open_recoveries(session, (rows.FENCED,)):
                if recovery.evacuation_id == evacuation_id:
                    recovery.status = rows.EVACUATING
                    rows.event(recovery, "evacuation", f"{evacuation_id}: {detail}")
        LOG.warning("hosts %s: evacuation %s started (%s)", ", ".join(names), evacuation_id,
                    detail)


def operator_took(session, recovery) -> str | None:
    """Why a FENCED recovery's host is an operator's now, or None.

    Between the fence and the evacuation (a monitor that died there and the
    next one taking over) an operator may have acted: set the host to
    another state, or evacuated it by hand, an evacuation that may even be
    over. The host is theirs then; creating the recorded evacuation would
    move what they decided not to, or evacuate the host a second time.
    """
    if session.get(Evacuation, recovery.evacuation_id) is not None:
        return None  # ours exists (its creation rewrote the host's reason): follow it
    host = session.scalars(sa.select(Host).where(Host.name == recovery.host)).first()
    if host is None:
        return "the host left the fleet"
    if host.state != states.HOST_DOWN or host.state_reason != FENCE_REASON:
        return f"an operator set the host {host.state} after the fence"
    if host.evacuation_id not in (None, recovery.evacuation_id):
        return f"an operator evacuates the host ({host.evacuation_id})"
    others = session.scalars(sa.select(Evacuation).where(
        Evacuation.id != recovery.evacuation_id,
        Evacuation.created_at >= recovery.suspect_at))
    for other in others:
        if recovery.host in (other.hosts or []):
            return f"an operator evacuated the host ({other.id})"
    return None


def _close_all(database, fence_token, evacuation_id: str, status: str, why: str) -> None:
    with database.session() as session:
        fences.check(session, fence_token)
        for recovery in rows.open_recoveries(session, (rows.FENCED,)):
            if recovery.evacuation_id == evacuation_id:
                rows.close(recovery, status, why)


def follow(database, fence_token: dict | None) -> None:
    """Close each EVACUATING recovery whose evacuation has settled, with its end."""
    with database.session() as session:
        fences.check(session, fence_token)
        for recovery in rows.open_recoveries(session, (rows.EVACUATING,)):
            evacuation = session.get(Evacuation, recovery.evacuation_id)
            if evacuation is None:
                continue
            if evacuation.status in SETTLED:
                rows.close(recovery, evacuation.status,
                           f"evacuation {evacuation.id} {evacuation.status}")
                LOG.warning("host %s recovered: evacuation %s %s", recovery.host,
                            evacuation.id, evacuation.status)
            elif evacuation.status == states.PAUSED:
                last = (recovery.timeline or [{}])[-1].get("event")
                if last != "paused":
                    rows.event(recovery, "paused", f"evacuation {evacuation.id} waits for "
                               "an operator (resume, skip or revert it)")


def crash_point() -> None:
    """``recovery:after-effect``: fenced and committed, no evacuation yet."""
    crash_points.maybe_crash(CRASH_ATOM, crash_points.AFTER_EFFECT)
