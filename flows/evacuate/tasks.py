"""The evacuation-wide atoms: lifecycle marker, host checks, scheduling, finish."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from fleetflow.common import metrics, states
from fleetflow.common.exceptions import Conflict
from fleetflow.compute.exceptions import ComputeError, HostNotServed
from fleetflow.flows import keys, runtime
from fleetflow.flows.evacuate import rows
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import reservations as reservation_rows
from fleetflow.persistence.models import Evacuation, Move
from fleetflow.scheduler.moves import plan as move_plan

LOG = logging.getLogger(__name__)

# A dead host must not keep the evacuation waiting for a full RPC timeout.
PING_TIMEOUT = 5


class HostAlive(Conflict):
    """A rebuild-evacuation of a host that still answers: two copies would run."""

    code = evac_rows.HOST_ALIVE


def answers(compute, host: str, timeout: float) -> bool:
    """Whether ``host`` answers a ping (a dead or unreachable host does not)."""
    try:
        compute.ping(host, timeout=timeout)
    except (ComputeError, HostNotServed):
        return False
    return True


class MarkEvacuationFailedOnRevert(FleetTask):
    """Nothing on execute.

    Revert (the whole flow failed, which a server's failure never causes):
    the evacuation FAILED with the fault that explains why, its hosts
    released; moves that were under way are REVERTED (their chains undid
    them), finished moves stay DONE.
    """

    def execute(self, evacuation_id: str) -> None:
        return None

    def revert(self, evacuation_id: str, flow_failures=None, **kwargs) -> None:
        fault = None
        if flow_failures:
            failure = next(iter(flow_failures.values()))
            # NOTE: a failure reloaded after a takeover has lost its exception
            # object (only type names and text remain): its code then comes
            # from the fault an earlier run of this revert wrote, kept below.
            code = getattr(failure.exception, "code", None) or "EVACUATION_FAILED"
            fault = reservation_rows.fault(code, failure.exception_str)
        with runtime.get().database.session() as session:
            written = evac_rows.get(session, evacuation_id).fault
            if written and written.get("code") != "EVACUATION_FAILED":
                fault = written
            reverted = session.execute(sa.update(Move).where(
                Move.evacuation_id == evacuation_id, Move.status == states.MOVING)
                .values(status=states.REVERTED, step=None)).rowcount
            # The fast path's claims were given back by its own revert.
            session.execute(sa.update(Move).where(
                Move.evacuation_id == evacuation_id, Move.step == "claimed")
                .values(step=None))
            evac_rows.set_status(session, evacuation_id, states.FAILED, fault=fault,
                                 stopping=None)
            evac_rows.release_hosts(session, evacuation_id)
        metrics.move_ended(states.REVERTED, reverted)


class PrepareHosts(FleetTask):
    """Rebuild: every host must still be silent (checked again: time has passed since
    the request); it stays fenced (``down``: no new work).

    Revert: nothing; a fence or a maintenance state stays until an operator lifts it.
    """

    def execute(self, evacuation_id: str) -> list:
        rt = runtime.get()
        with rt.database.session() as session:
            evacuation = evac_rows.get(session, evacuation_id)
            hosts, mode = list(evacuation.hosts), evacuation.mode
            evac_rows.set_status(session, evacuation_id, states.RUNNING)
        if mode == states.MODE_REBUILD:
            timeout = min(PING_TIMEOUT, rt.conf.messaging.rpc_timeout)
            alive = [h for h in hosts if answers(rt.compute, h, timeout)]
            if alive:
                raise HostAlive(f"host {', '.join(alive)} answers: a rebuild would run a "
                                "second copy of its servers", hosts=alive)
        for host in hosts:
            rt.compute.close_host(host, mode, f"evacuation {evacuation_id}")
        return hosts


class ScheduleMoves(FleetTask):
    """Place every server of this run in one pass from one view of the cloud.

    Provides ``{"hosts": {index: [destination, alternates...]}, "unplaced":
    {index: [code, explanation]}, "servers": {index: {source, mode, resources,
    image, volumes}}, "fallback_cold": bool, "tried": {index: count}}`` (indexes
    as strings: the store is JSON): what the move tasks need, so that they read
    no rows. ``tried`` counts the hosts each server's row says were tried before
    this run: a group of servers run again after a crash tells this run's
    failed tries from its row by it (batch.py).
    A server that fits nowhere is not an error here: its retry records it.

    Revert: nothing to undo: scheduling claims nothing.
    """

    default_provides = keys.MOVE_PLACEMENTS

    def execute(self, evacuation_id: str, instance_uuids: list) -> dict:
        rt = runtime.get()
        usage = rt.placement.usages_by_provider()
        with rt.database.session() as session:
            evacuation = evac_rows.get(session, evacuation_id)
            # A new run starts from what the row says now (an operator's
            # resume cleared ``stopping`` in another process, perhaps just now).
            rows.stopped(rt.database, evacuation_id, evacuation.stopping)
            plan = move_plan.plan(session, evacuation, list(instance_uuids), usage,
                                      rt.conf)
            fallback = (evacuation.mode == states.MODE_DRAIN
                        and evacuation.fallback == states.FALLBACK_COLD)
            tried = {uuid: len(hosts or ()) for uuid, hosts in session.execute(sa.select(
                Move.instance_id, Move.hosts_tried).where(
                    Move.evacuation_id == evacuation_id))}
        positions = {uuid: str(i) for i, uuid in enumerate(instance_uuids)}
        LOG.info("evacuation %s: %d servers placed, %d not", evacuation_id,
                 len(plan.candidates), len(plan.unplaced))
        return {"hosts": {positions[u]: c for u, c in plan.candidates.items()},
                "unplaced": {positions[u]: list(w) for u, w in plan.unplaced.items()},
                "servers": {positions[u]: info for u, info in plan.servers.items()},
                "fallback_cold": fallback,
                "tried": {positions[u]: n for u, n in tried.items() if n and u in positions}}


def settle(session, evacuation: Evacuation) -> str:
    """The evacuation's outcome from its moves; releases its hosts unless it pauses."""
    counts = evac_rows.progress(session, evacuation.id)
    unfinished = counts["pending"] + counts["failed"] + counts["moving"]
    if evacuation.stopping == states.ON_ERROR_REVERT:
        metrics.move_ended(states.REVERTED, session.execute(sa.update(Move).where(
            Move.evacuation_id == evacuation.id,
            Move.status.in_((states.PENDING, states.MOVING))).values(
                status=states.REVERTED, step=None)).rowcount)
        status = states.REVERTED
    elif evacuation.stopping == states.ON_ERROR_PAUSE and unfinished:
        status = states.PAUSED
    elif counts["failed"] or counts["skipped"] or unfinished:
        status = states.PARTIAL
    else:
        status = states.DONE
    values = {}
    if status != states.PAUSED:
        values["stopping"] = None
        evac_rows.release_hosts(session, evacuation.id)
    evac_rows.set_status(session, evacuation.id, status, **values)
    return status


class FinishEvacuation(FleetTask):
    """DONE, PARTIAL, PAUSED or REVERTED, from the moves; the hosts released unless PAUSED.

    Revert: nothing of its own (the lifecycle marker writes FAILED).
    """

    def execute(self, evacuation_id: str) -> str:
        with runtime.get().database.session() as session:
            evacuation = evac_rows.get(session, evacuation_id, lock=True)
            status = settle(session, evacuation)
        LOG.info("evacuation %s is %s", evacuation_id, status)
        return status
