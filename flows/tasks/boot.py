"""Boots: one RPC to the chosen host, which answers once the guest is ACTIVE.

A build is keyed by the instance uuid on the host, so a boot repeated after
a crash (TaskFlow re-runs atoms that were RUNNING) finds the guest already
there and spawns nothing; an unanswered call is settled by asking the host
what it has (``ensure_built``) before sending the build again.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from fleetflow.common import crash_points, states
from fleetflow.common.exceptions import FleetflowError, StaleFence
from fleetflow.compute.build_batches import UNBATCHED
from fleetflow.compute.exceptions import OutcomeUnknown
from fleetflow.flows import runtime
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Host, Instance, utcnow

LOG = logging.getLogger(__name__)


def note_build_failure(session, host: str) -> None:
    session.execute(sa.update(Host).where(Host.name == host).values(
        build_failures=Host.build_failures + 1, last_build_failure_at=utcnow()))


def record_build_failure(session, uuid: str, host: str, exc: FleetflowError) -> None:
    """The failed build's fault on the instance row, and one more failure of the host."""
    rows.update_instance(session, uuid, fault=rows.fault(exc.code, exc.message, step="boot",
                                                         host=host))
    note_build_failure(session, host)


def build_on(host: str, uuid: str, request_spec: dict, fence=None,
             final: bool = True, crash_as: str | None = None) -> dict | None:
    """Build ``uuid`` on ``host`` and wait for ACTIVE; returns the host's guest.

    A failure is written on the instance row (code, message, step, host) and
    counted against the host before it is raised. ``final``: the row says
    ACTIVE afterwards (no attach follows). ``crash_as``: the group task whose
    ``member-built`` crash point fires between the build and that write.
    """
    rt = runtime.get()
    try:
        guest = rt.compute.ensure_built(host, uuid, request_spec["resources"],
                                        image=request_spec.get("image_id"), fence=fence)
    except StaleFence:
        raise  # this process lost the flow: nothing to record of the host
    except FleetflowError as exc:
        with rt.database.session() as session:
            record_build_failure(session, uuid, host, exc)
        raise
    if crash_as:
        crash_points.maybe_crash(crash_as, crash_points.MEMBER_BUILT)
    values = {"host": host, "fault": None}
    if final:
        values.update(status=states.ACTIVE, task_state=None)
    # Committed before returning, with whatever other boots end now.
    rows.write_instance(rt.database, uuid, **values)
    return guest


def build_together(name: str, tries: dict, fence=None) -> tuple[dict, dict]:
    """Build many tries at once from this thread: ``(built, failed)``, each by the key
    of ``tries`` (``{key: {"host", "uuid", "resources", "image"}}``, rows holding each
    try on its host); built: its host, failed: the build's error.

    One call for them all (``ComputeAPI.build_all``) instead of a thread and a wait
    a try, and the rows of those ACTIVE written in one statement. A failed build is
    recorded as :func:`build_on` records it; a build unanswered (or not sent: an
    agent older than batches) is in neither, for its member to try again, asking
    the host first. StaleFence is raised with nothing recorded.
    """
    rt = runtime.get()
    build_all = getattr(rt.compute, "build_all", None)  # Nova's client has none
    if build_all is None or not tries:
        return {}, {}
    outcomes = build_all(list(tries.values()), fence=fence)
    built, failed = {}, {}
    for (key, build), (guest, error) in zip(tries.items(), outcomes, strict=True):
        if error is None and guest is not UNBATCHED:
            built[key] = build["host"]
        elif isinstance(error, StaleFence):
            raise error  # this process lost the flow: nothing of it is recorded
        elif isinstance(error, FleetflowError) and not isinstance(error, OutcomeUnknown):
            failed[key] = error
        elif error is not None and not isinstance(error, OutcomeUnknown):
            raise error
    if failed:
        with rt.database.session() as session:
            for key, error in failed.items():
                record_build_failure(session, tries[key]["uuid"], tries[key]["host"], error)
    if built:
        crash_points.maybe_crash(name, crash_points.MEMBER_BUILT)
        with rt.database.session() as session:
            rows.update_instances(session, [tries[key]["uuid"] for key in built],
                                  status=states.ACTIVE, task_state=None, fault=None)
    return built, failed


def destroy_built(uuid: str, built: str | None = None, fence=None) -> None:
    """Destroy the guest wherever a try may have built it: the instance row's
    host, and ``built`` when that differs; the row says REVERTING first.

    Idempotent, nothing when neither names a host.
    """
    rt = runtime.get()
    with rt.database.session() as session:
        instance = session.get(Instance, uuid)
        hosts = {h for h in (instance.host if instance is not None else None, built) if h}
        if not hosts:
            return  # never claimed anywhere (or no host was left): nothing built
        rows.update_instance(session, uuid, status=states.REVERTING,
                             task_state=states.TASK_REVERTING)
    # Whether or not the build finished, the world may hold a guest: a crash
    # can come after the host built it and before anything was saved.
    for host in sorted(hosts):
        rt.compute.ensure_destroyed(host, uuid, fence=fence)


class BootInstance(FleetTask):
    """Build the instance on its host and wait for ACTIVE.

    ``host`` None (best-effort, candidates ran out) does nothing. A failure
    is written on the instance row (code, message, step, host) before it is
    raised, so the retry's next attempt and the API both see it.

    Revert: destroys the guest on the host it was built on (idempotent;
    nothing if absent): the instance row's, which this try's claim wrote
    before the boot, and the result's when that differs (after a crash in the
    middle of a later try, TaskFlow's stock engine may still hand over the
    earlier try's result; docs/engine.md). Never the retry's ``host``, which
    a REVERTED retry no longer has.
    """

    def __init__(self, *args, final: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        # The last task of the instance's chain marks it ACTIVE.
        self.final = final

    def execute(self, instance_uuids: list, index: int, host: str | None,
                request_spec: dict, fence=None) -> dict | None:
        if host is None:
            return None
        guest = build_on(host, instance_uuids[index], request_spec, fence, final=self.final)
        return {"host": host, "state": guest.get("state") if guest else None}

    def revert(self, result, instance_uuids: list, index: int, fence=None,
               **kwargs) -> None:
        built = result.get("host") if isinstance(result, dict) else None
        destroy_built(instance_uuids[index], built, fence)
