"""Scheduling: every instance of a reservation placed in one pass from one view.

The view is read in one go — hosts, placement usage, the group's current
members, hosts that failed builds lately — and handed to the pure scheduler
(one view, so N instances are balanced, not N racing views:
docs/origins.md, "Reservations of N instances").
"""

from __future__ import annotations

import datetime as dt
import logging

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.flows import keys, runtime
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence import groups
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Host, utcnow
from fleetflow.scheduler import scheduler
from fleetflow.scheduler.result import NoValidHost
from fleetflow.scheduler.snapshot import snapshot_from_db
from fleetflow.scheduler.spec import GroupSpec, RequestSpec

LOG = logging.getLogger(__name__)

# Build failures older than this no longer weigh a host down.
FAILURE_MEMORY = dt.timedelta(minutes=30)


def recent_failures(session) -> dict[str, int]:
    since = utcnow() - FAILURE_MEMORY
    return dict(session.execute(
        sa.select(Host.name, Host.build_failures).where(
            Host.build_failures > 0, Host.last_build_failure_at >= since)).all())


def group_spec(session, spec: dict, own_instances: list[str]) -> GroupSpec | None:
    """The request's group with the hosts of its members (other than ours) now."""
    group = spec.get("group")
    if not group:
        return None
    row = groups.get(session, group["id"])
    return GroupSpec.from_row(row, exclude_instances=own_instances)


def request_spec(session, spec: dict, instance_uuids: list[str],
                 excluded_hosts: list[str] = (), count: int | None = None) -> RequestSpec:
    """The scheduler's RequestSpec for a stored request (see services.reservations)."""
    min_count = spec["min_count"] if count is None else count
    max_count = spec["max_count"] if count is None else count
    return RequestSpec(
        resources=dict(spec["resources"]), min_count=min_count, max_count=max_count,
        capabilities=dict(spec.get("capabilities") or {}),
        required_traits=list(spec.get("required_traits") or []),
        forbidden_traits=list(spec.get("forbidden_traits") or []),
        region=spec.get("region"), zone=spec.get("zone"),
        group=group_spec(session, spec, instance_uuids),
        excluded_hosts=list(excluded_hosts), instance_uuids=list(instance_uuids),
        volume_gb=spec.get("volume_gb"))


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


def dry_run(session, spec: dict, conf) -> dict:
    """Whether ``spec`` fits now, and why not; reads only (the API's ``dry_run``)."""
    from fleetflow.persistence.placement import allocations

    usage = allocations.usages_by_provider(session)
    snapshot = snapshot_from_db(session, usage, recent_failures(session),
                                storage=bool(spec.get("volume_gb")))
    req = request_spec(session, spec, [], count=None)
    try:
        result = scheduler.schedule(req, snapshot, alternates=0, weigher=conf.scheduler.weigher)
    except NoValidHost as exc:
        return {"fits": False, "placed": exc.details.get("placed", 0),
                "min_count": req.min_count, "max_count": req.max_count,
                "explanation": exc.message, "filters": exc.details.get("filters", [])}
    hosts: dict[str, int] = {}
    for p in result.instances:
        hosts[p.host] = hosts.get(p.host, 0) + 1
    return {"fits": True, "placed": len(result.instances), "min_count": req.min_count,
            "max_count": req.max_count, "explanation": result.explanation,
            "filters": [s.to_dict() for s in result.filters], "hosts": hosts}


class ScheduleInstances(FleetTask):
    """Place every instance of the reservation: a primary host and alternates each.

    Provides ``{"hosts": {index: [primary, alternate, ...]}, "host_uuids": {...}}``
    (indexes as strings: the store is JSON). Instances beyond what fits (only
    when min_count < max_count) get no hosts and end ERROR with NO_VALID_HOST.

    Revert: nothing to undo — scheduling writes no allocation; the claims do.
    """

    default_provides = keys.PLACEMENTS

    def execute(self, reservation_id: str, request_spec: dict) -> dict:
        rt = runtime.get()
        with rt.database.session() as session:
            rows.set_status(session, reservation_id, states.SCHEDULING)
            uuids = rows.instance_ids(session, reservation_id)
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
