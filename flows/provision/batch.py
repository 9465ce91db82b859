"""Instances in groups: one task claims and boots many members of a reservation.

Per-instance chains (a retry, a claim and a boot each) cost the engine about
as much again as the work itself: scheduling, checkpointing, compiling and
validating three atoms an instance. A reservation of more than
``[conductor] instances_per_atom`` instances is therefore built in groups of
that many, one :class:`BuildInstances` task a group, which walks each
member's hosts as the member's retry would: its candidates, then up to
``max_reschedules`` hosts chosen afresh, a claim lost to a race not counting.

What the per-instance atoms kept in the logbook, a group keeps in the
instance rows, written in the same order the chains write them:

- a try is recorded (host, ``hosts_tried``) once its claim holds, and the
  row says ``spawning`` until the build ends (ACTIVE) or the try is undone;
- a try undone (guest destroyed, claim released) leaves the row on no host.

So a group re-run after a crash, or after a database outage, resumes every
member from its row: ACTIVE is done, ERROR gave up (best-effort), a row
``spawning`` on a host holds its claim there and its build is sent again
(idempotent by uuid); any other starts a fresh try on the first candidate
not in ``hosts_tried``. A crash between a claim and its record may leave an
allocation the row does not name: a fresh try claims *exactly* (the stray one
is dropped in the same write). The members run at once on the process's
member pool, so a group of slow boots takes one boot's time, not a hundred.

Revert: every member's guest destroyed wherever its row or the result says
it was built, then every member's claim released, whatever the result says.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from fleetflow.common import crash_points, metrics, states
from fleetflow.common.exceptions import FleetflowError, StaleFence
from fleetflow.flows import runtime
from fleetflow.flows.provision import schedule
from fleetflow.flows.provision.retry import record_no_host
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.flows.tasks.boot import build_on, build_together, destroy_built
from fleetflow.flows.tasks.claim import ClaimRace, claim_on, record_gave_up, release
from fleetflow.flows.tasks.members import run_all
from fleetflow.persistence import bulk, groups
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Instance
from fleetflow.scheduler.result import NoValidHost

LOG = logging.getLogger(__name__)

@dataclasses.dataclass
class _Group:
    """What every member of one group's run shares."""

    placements: dict
    request_spec: dict
    tenant_id: str
    policy: str
    max_reschedules: int
    fence: Any
    # Set when an all-or-nothing member gave up: the others start no new try.
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)

    @property
    def group_id(self) -> str | None:
        return (self.request_spec.get("group") or {}).get("id")


def _rows(uuids: list[str]) -> dict[str, tuple]:
    rt = runtime.get()
    table = Instance.__table__
    # A read: a hundred groups starting at once take no write lock for it.
    with rt.database.read_session() as session:
        found = bulk.select_ids(session, (table.c.id, table.c.status, table.c.task_state,
                                          table.c.host, table.c.hosts_tried), uuids)
    return {uuid: (status, task_state, host, list(tried or []))
            for uuid, status, task_state, host, tried in found}


def _undo_try(group: _Group, name: str, uuid: str, host: str) -> None:
    """Destroy the try's guest, release its claim, then say the row holds no host.

    In this order so a crash in between leaves a row that still names the
    host to clean, or one that names no host and holds nothing there.
    """
    destroy_built(uuid, host, group.fence)
    release(uuid, host, group.group_id, group.fence)
    crash_points.maybe_crash(name, crash_points.MEMBER_UNDONE)
    rt = runtime.get()
    with rt.database.session() as session:
        rows.update_instance(session, uuid, status=states.BUILDING, host=None,
                             task_state=states.TASK_SCHEDULING)


def _next_host(group: _Group, index: int, uuid: str, candidates: list,
               excluded: set, rescheduled: int) -> str | None:
    """The first candidate not tried, else a host chosen afresh, else None."""
    for host in candidates:
        if host not in excluded:
            return host
    if not _any_left(group, candidates, excluded, rescheduled):
        return None
    try:
        placed = schedule.place(group.request_spec, [uuid], excluded_hosts=sorted(excluded),
                                count=1)
    except NoValidHost as exc:
        LOG.info("instance %d: nothing left to reschedule onto: %s", index, exc)
        record_no_host(uuid, exc.message)
        return None
    host = placed.instances[0].host
    LOG.info("instance %d: candidates exhausted, rescheduled onto %s", index, host)
    metrics.RESCHEDULES.inc()
    return host


def _any_left(group: _Group, candidates: list, excluded: set, rescheduled: int) -> bool:
    """Whether a candidate is untried or a reschedule is still allowed."""
    return (any(host not in excluded for host in candidates)
            or rescheduled < group.max_reschedules)


def build_member(group: _Group, name: str, index: int, uuid: str,
                 row: tuple | None, build_failure: FleetflowError | None = None
                 ) -> str | None:
    """Claim and boot one member, trying its hosts in turn; the host it is ACTIVE on.

    None: it gave up (best-effort: recorded ERROR), or another member of an
    all-or-nothing group gave up first. An all-or-nothing member out of hosts
    raises its last build's failure, that try left held, or NoValidHost when
    the last host it could try was not one it could claim. ``build_failure``:
    the build of the try its row holds failed so (the group's first wave, which
    recorded it); the member goes on from there.
    """
    status, task_state, host, tried = row or (None, None, None, [])
    if status == states.ACTIVE and host:
        return host
    if status == states.ERROR:
        return None
    candidates = list(group.placements["hosts"].get(str(index), []))
    claimed = host if status == states.BUILDING and task_state == states.TASK_SPAWNING else None
    failed = [h for h in tried if h != claimed]
    excluded = set(failed)
    rescheduled = sum(1 for h in failed if h not in candidates)
    host = claimed
    while True:
        if host is None:
            if group.stop.is_set():
                return None
            host = _next_host(group, index, uuid, candidates, excluded, rescheduled)
            if host is None:
                break
            try:
                claim_on(uuid, host, group.placements, group.request_spec, group.tenant_id,
                         group.fence, exactly=True)
            except ClaimRace as exc:
                LOG.info("instance %d: claim lost on %s: %s", index, host, exc)
                excluded.add(host)
                host = None
                continue
            crash_points.maybe_crash(name, crash_points.MEMBER_CLAIMED)
        try:
            if build_failure is not None:
                failure, build_failure = build_failure, None
                raise failure
            build_on(host, uuid, group.request_spec, group.fence, crash_as=name)
            return host
        except StaleFence:
            # This process no longer owns the flow: its new owner carries on
            # from the rows, which a stale try must not touch again.
            group.stop.set()
            raise
        except FleetflowError as exc:
            LOG.info("instance %d: build failed on %s: %s", index, host, exc)
            excluded.add(host)
            rescheduled += host not in candidates
            if group.policy != states.BEST_EFFORT and not _any_left(
                    group, candidates, excluded, rescheduled):
                # The last try stays held, as a chain's last failed boot does:
                # the reservation reverts, or an operator's resume of a paused
                # flow builds it again there.
                group.stop.set()
                raise
            _undo_try(group, name, uuid, host)
            host = None
    if group.policy == states.BEST_EFFORT:
        # Whatever a try cut off by a crash may still hold (a claim released
        # after its guest was destroyed), none of it stays with an ERROR member.
        release(uuid, None, group.group_id, group.fence)
        record_gave_up(uuid)
        return None
    group.stop.set()
    raise NoValidHost([], placed=0, min_count=1, index=index)


def first_wave(group: _Group, name: str, members: dict[int, tuple[str, tuple | None]]
               ) -> tuple[dict[int, str], dict[int, FleetflowError]]:
    """Build at once, from this thread, every member whose row holds a claimed try
    (claim-primaries claimed them all): ``(built, failed)`` by index
    (:func:`~fleetflow.flows.tasks.boot.build_together`)."""
    claimed = {i: {"host": row[2], "uuid": uuid, "resources": group.request_spec["resources"],
                   "image": group.request_spec.get("image_id")}
               for i, (uuid, row) in members.items()
               if row and row[0] == states.BUILDING and row[1] == states.TASK_SPAWNING
               and row[2]}
    try:
        return build_together(name, claimed, group.fence)
    except StaleFence:
        group.stop.set()
        raise


class BuildInstances(FleetTask):
    """Claim and boot the instances ``first`` to ``last - 1`` of the reservation.

    Provides nothing to other atoms (its result, ``{"hosts": {index: host}}``,
    is for its revert). Fails when an all-or-nothing member runs out of hosts,
    which reverts the reservation.

    Revert: destroys every member's guest (the row's host and the result's)
    and releases every member's claim and group membership.
    """

    def __init__(self, name: str, first: int, last: int, policy: str,
                 max_reschedules: int):
        super().__init__(name=name)
        self.first, self.last = first, last
        self.policy = policy
        self.max_reschedules = max_reschedules

    def execute(self, instance_uuids: list, placements: dict, request_spec: dict,
                tenant_id: str, fence=None) -> dict:
        indexes = range(self.first, self.last)
        known = _rows([instance_uuids[i] for i in indexes])
        group = _Group(placements, request_spec, tenant_id, self.policy,
                       self.max_reschedules, fence)
        built, failed = first_wave(group, self.name, {
            i: (instance_uuids[i], known.get(instance_uuids[i])) for i in indexes})
        rest = [i for i in indexes if i not in built]
        hosts = run_all(lambda i: build_member(group, self.name, i, instance_uuids[i],
                                                known.get(instance_uuids[i]), failed.get(i)),
                        rest)
        built.update(zip(rest, hosts, strict=True))
        return {"hosts": {str(i): built[i] for i in indexes}}

    def revert(self, result, instance_uuids: list, request_spec: dict, fence=None,
               **kwargs) -> None:
        rt = runtime.get()
        built = result.get("hosts", {}) if isinstance(result, dict) else {}
        indexes = range(self.first, self.last)
        run_all(lambda i: destroy_built(instance_uuids[i], built.get(str(i)), fence),
                 indexes)
        uuids = [instance_uuids[i] for i in indexes]
        rt.placement.release_many(uuids, fence=fence)
        group_id = (request_spec.get("group") or {}).get("id")
        if group_id:
            with rt.database.session() as session:
                for uuid in uuids:
                    groups.leave(session, uuid, group_id)
