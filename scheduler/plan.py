"""A reservation's request and the cloud read from the database for the scheduler.

The schedule task and a reschedule place from the spec stored with the
reservation and from hosts that failed builds lately; the API's dry run
reads the same and answers whether the request fits now, writing nothing.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from fleetflow.persistence import groups
from fleetflow.persistence.models import Host, utcnow
from fleetflow.scheduler import scheduler
from fleetflow.scheduler.result import NoValidHost
from fleetflow.scheduler.snapshot import snapshot_from_db
from fleetflow.scheduler.spec import GroupSpec, RequestSpec

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
