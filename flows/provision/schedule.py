"""Scheduling: every instance of a reservation placed in one pass from one view.

The view is read in one go — hosts, placement usage, the group's current
members, hosts that failed builds lately — and handed to the pure scheduler
(one view, so N instances are balanced, not N racing views:
docs/origins.md, "Reservations of N instances"). What the request and the
recent build failures say is read by ``scheduler/plan.py``, which the API's
dry run uses too.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.flows import keys, runtime
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Host
from fleetflow.scheduler import scheduler
from fleetflow.scheduler.plan import recent_failures, request_spec
from fleetflow.scheduler.result import NoValidHost
from fleetflow.scheduler.snapshot import snapshot_from_db

LOG = logging.getLogger(__name__)


def place(spec: dict, instance_uuids: list[str], excluded_hosts: list[str] = (),
          count: int | None = None):
    """Run the scheduler on a fresh view of the cloud; returns a scheduler Placement."""
    rt = runtime.get()
    usage = rt.placement.usages_by_provider()
    with rt.database.session() as session:
        snapshot = snapshot_from_db(session, usage, recent_failures(session),
                                    storage=bool(spec.get("volume_gb")))
        req = request_spec(session, spec, instance_uuids, excluded_hosts, count)
    return scheduler.schedule(req, snapshot, alternates=rt.conf.scheduler.alternates,
                              weigher=rt.conf.scheduler.weigher)


class ScheduleInstances(FleetTask):
    """Place every instance of the reservation: a primary host and alternates each.

    Provides ``{"hosts": {index: [primary, alternate, ...]}, "host_uuids": {...}}``
    (indexes as strings: the store is JSON). Instances beyond what fits (only
    when min_count < max_count) get no hosts and end ERROR with NO_VALID_HOST.

    Revert: nothing to undo — scheduling writes no allocation; the claims do.
    """

    default_provides = keys.PLACEMENTS

    def execute(self, reservation_id: str, request_spec: dict, instance_uuids: list) -> dict:
        rt = runtime.get()
        with rt.database.session() as session:
            rows.set_status(session, reservation_id, states.SCHEDULING)
        # The reservation's instance ids by index, as its submission stored them
        # (read from its rows then): the same list, not read again.
        uuids = list(instance_uuids)
        admitted = request_spec.get("admitted_hosts")
        if admitted:
            return _admitted(reservation_id, uuids, admitted)
        try:
            result = place(request_spec, uuids)
        except NoValidHost as exc:
            with rt.database.session() as session:
                fault = rows.fault(exc.code, exc.message, step="schedule")
                rows.update_instances(session, uuids, status=states.ERROR, fault=fault,
                                      task_state=None)
                rows.set_status(session, reservation_id, states.ERROR, fault=fault)
            raise
        hosts = {str(p.index): p.candidates for p in result.instances}
        unplaced = uuids[len(result.instances):]
        with rt.database.session() as session:
            rows.update_instances(session, uuids[:len(result.instances)],
                                  status=states.BUILDING, task_state=states.TASK_CLAIMING)
            if unplaced:
                rows.update_instances(session, unplaced, status=states.ERROR, task_state=None,
                                      fault=rows.fault(NoValidHost.code,
                                                       result.explanation or "did not fit",
                                                       step="schedule"))
            rows.set_status(session, reservation_id, states.BUILDING)
        LOG.info("reservation %s: placed %d of %d (%s)", reservation_id,
                 len(result.instances), len(uuids), result.explanation)
        return {"hosts": hosts, "host_uuids": result.host_uuids}


def _admitted(reservation_id: str, uuids: list[str], admitted: list[str]) -> dict:
    """The placements of a reservation the queue admitted: where the admission pass put it.

    Each instance's one candidate is its admitted host: the claims check it still
    fits (a host lost meanwhile is a lost claim, and the retry reschedules as for
    any reservation). Instances beyond those placed (best-effort) end ERROR.
    """
    rt = runtime.get()
    placed = uuids[:len(admitted)]
    with rt.database.session() as session:
        host_uuids = dict(session.execute(sa.select(Host.name, Host.uuid).where(
            Host.name.in_(set(admitted)))).all())
        rows.update_instances(session, placed, status=states.BUILDING,
                              task_state=states.TASK_CLAIMING)
        if len(uuids) > len(placed):
            rows.update_instances(session, uuids[len(placed):], status=states.ERROR,
                                  task_state=None, fault=rows.fault(
                                      NoValidHost.code, "did not fit when admitted",
                                      step="schedule"))
        rows.set_status(session, reservation_id, states.BUILDING)
    LOG.info("reservation %s: %d of %d on the hosts its admission chose", reservation_id,
             len(placed), len(uuids))
    return {"hosts": {str(i): [host] for i, host in enumerate(admitted[:len(uuids)])},
            "host_uuids": host_uuids}
