"""Members in groups: one task builds many servers and volumes of a vcluster run.

A member's chain (a retry over its candidates, then a boot or a create) costs
the engine two atoms a member: scheduling, checkpointing and validating
each. A run of more than ``[conductor] instances_per_atom`` members is
therefore built in groups of that many, one :class:`BuildMembers` task a
group. Each member walks its candidates in order as its retry would, with
the same steps writing the same rows:

- the primary is held by the run's one claim for all; an alternate is
  claimed (:func:`members.claim_alternate`) before the member is tried
  there, one taken meanwhile passed over;
- a server's failed boot is undone (guest destroyed, the row REVERTING)
  before its next candidate; a volume's failed create is deleted (the row
  left ERROR) before its next.

What the chain kept in its retry's history, a group reads from the member's
row, so a group run again after a crash resumes every member from it:

- a server ACTIVE, a volume AVAILABLE: done;
- a server BUILDING on a host, a volume CREATING on a backend: that try is
  taken up again there, its claim written again first when that is an
  alternate (idempotent);
- a server REVERTING, a volume ERROR: that try failed; it is undone again
  and the member goes on from the candidate after it.

Out of candidates, a member raises its last failure once every other member
of the group has stopped (none starts a new try after that) and the run
reverts, as the chain's retry reverts it.

Revert: every server's guest destroyed and every volume deleted, wherever
its row or the result says; the claim's revert releases their allocations.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

import sqlalchemy as sa

from fleetflow.common import crash_points, states
from fleetflow.common.exceptions import FleetflowError, StaleFence
from fleetflow.flows import runtime
from fleetflow.flows.tasks.base import FleetTask
from fleetflow.flows.tasks.boot import build_on, build_together, destroy_built
from fleetflow.flows.tasks.claim import ClaimRace
from fleetflow.flows.tasks.members import run_all
from fleetflow.flows.vcluster.build_tasks import VClusterNoValidHost
from fleetflow.flows.vcluster.members import claim_alternate, create_on, delete_made
from fleetflow.persistence.models import Instance, Volume

LOG = logging.getLogger(__name__)

SERVER, VOLUME = states.MEMBER_SERVER, states.MEMBER_VOLUME


@dataclasses.dataclass
class _Run:
    """What every member of one group's run shares."""

    placement: dict
    vcluster_id: str
    tenant_id: str
    fence: Any
    # Set when a member ran out of candidates: the others start no new try.
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)


@dataclasses.dataclass
class _Member:
    kind: str
    spec: dict
    # Where the member's row says it is: (status, host or backend).
    row: tuple

    @property
    def id(self) -> str:
        return self.spec["id"]

    @property
    def amounts(self) -> dict:
        if self.kind == SERVER:
            return self.spec["resources"]
        return {"DISK_GB": int(self.spec["size_gb"])}


def _rows(server_ids: list[str], volume_ids: list[str]) -> dict[str, tuple]:
    rt = runtime.get()
    found = {}
    with rt.database.read_session() as session:
        if server_ids:
            found.update((r.id, (r.status, r.host)) for r in session.execute(
                sa.select(Instance.id, Instance.status, Instance.host)
                .where(Instance.id.in_(server_ids))))
        if volume_ids:
            found.update((r.id, (r.status, r.backend)) for r in session.execute(
                sa.select(Volume.id, Volume.status, Volume.backend)
                .where(Volume.id.in_(volume_ids))))
    return found


def _done(member: _Member) -> bool:
    status, where = member.row
    return bool(where) and status == (states.ACTIVE if member.kind == SERVER
                                      else states.VOLUME_AVAILABLE)


def _failed(member: _Member) -> bool:
    """Whether the row's try failed (it may not be undone yet)."""
    return member.row[0] == (states.REVERTING if member.kind == SERVER
                             else states.VOLUME_ERROR)


def _try(run: _Run, name: str, member: _Member, where: str) -> None:
    if member.kind == SERVER:
        build_on(where, member.id, {"resources": member.spec["resources"],
                                    "image_id": member.spec["image_id"]}, run.fence,
                 crash_as=name)
    else:
        create_on(member.id, where, int(member.spec["size_gb"]),
                  member.spec.get("volume_type"), run.placement, run.fence)


def _undo(run: _Run, name: str, member: _Member, where: str) -> None:
    """Undo a failed try; the row says it failed until the next claim moves it."""
    if member.kind == SERVER:
        destroy_built(member.id, where, run.fence)
    else:
        delete_made(member.id, where, run.fence)
    crash_points.maybe_crash(name, crash_points.MEMBER_UNDONE)


def build_member(run: _Run, name: str, member: _Member,
                 failed: FleetflowError | None = None) -> str | None:
    """Try the member on its candidates in turn; where it ended (host or backend).

    None: another member ran out first and this one stopped before a new
    try. Out of candidates: its last failure raised, or VClusterNoValidHost
    when none was left to try. ``failed``: the try its row holds failed so
    (the group's first wave, which recorded it); the member goes on from there.
    """
    if _done(member):
        return member.row[1]
    candidates = list(run.placement["hosts" if member.kind == SERVER
                                    else "backends"][member.spec["name"]])
    position, resumed = 0, False
    if member.row[1] in candidates:
        position, resumed = candidates.index(member.row[1]), True
        if _failed(member):
            _undo(run, name, member, member.row[1])
            position, resumed = position + 1, False
    failure: FleetflowError | None = None
    for where in candidates[position:]:
        if run.stop.is_set():
            return None
        if where != candidates[0]:
            # The claim for all holds the primary; an alternate is claimed here,
            # and again when its try is resumed (a repeat writes nothing).
            try:
                claim_alternate(member.kind, member.spec["name"], member.id, member.amounts,
                                where, run.placement, run.vcluster_id, run.tenant_id,
                                run.fence)
            except ClaimRace as exc:
                LOG.info("%s %s: alternate %s is taken (%s)", member.kind,
                         member.spec["name"], where, exc)
                continue
            if not resumed:
                crash_points.maybe_crash(name, crash_points.MEMBER_CLAIMED)
        resumed = False
        try:
            if failed is not None:
                failure, failed = failed, None
                raise failure
            _try(run, name, member, where)
            return where
        except StaleFence:
            # This process no longer owns the flow: its new owner carries on
            # from the rows, which a stale try must not touch again.
            run.stop.set()
            raise
        except FleetflowError as exc:
            LOG.info("%s %s: failed on %s: %s", member.kind, member.spec["name"], where, exc)
            failure = exc
            if where == candidates[-1]:
                break  # the last try stays as it is: the run's revert undoes it
            _undo(run, name, member, where)
    run.stop.set()
    if failure is not None:
        raise failure
    raise VClusterNoValidHost(f"{member.kind} {member.spec['name']}: every candidate "
                              f"failed ({', '.join(candidates) or 'none left'})")


def first_wave(run: _Run, name: str, members: list[_Member]
               ) -> tuple[dict[str, str], dict[str, FleetflowError]]:
    """Build at once, from this thread, every server whose row holds its try on its
    primary (the claim for all wrote them all): ``(built, failed)`` by member id
    (:func:`~fleetflow.flows.tasks.boot.build_together`)."""
    tries = {m.id: {"host": m.row[1], "uuid": m.id, "resources": m.spec["resources"],
                    "image": m.spec["image_id"]}
             for m in members
             if m.kind == SERVER and m.row[0] == states.BUILDING and m.row[1]
             and m.row[1] == next(iter(run.placement["hosts"][m.spec["name"]]), None)}
    try:
        return build_together(name, tries, run.fence)
    except StaleFence:
        run.stop.set()
        raise


class BuildMembers(FleetTask):
    """Build the servers and volumes ``servers`` and ``volumes`` of the run.

    Provides nothing to other atoms (its result, ``{"built": {id: host or
    backend}}``, is for its revert). Fails when a member runs out of
    candidates, which reverts the run.

    Revert: destroys every server's guest and deletes every volume, where
    its row or the result says (idempotent).
    """

    def __init__(self, name: str, servers: list[dict], volumes: list[dict]):
        super().__init__(name=name)
        self.servers, self.volumes = list(servers), list(volumes)

    def execute(self, vcluster_id: str, vcluster_placement: dict, tenant_id: str,
                fence=None) -> dict:
        run = _Run(vcluster_placement, vcluster_id, tenant_id, fence)
        known = _rows([s["id"] for s in self.servers], [v["id"] for v in self.volumes])
        members = ([_Member(SERVER, s, known.get(s["id"], (None, None))) for s in self.servers]
                   + [_Member(VOLUME, v, known.get(v["id"], (None, None)))
                      for v in self.volumes])
        built, failed = first_wave(run, self.name, members)
        rest = [m for m in members if m.id not in built]
        ended = run_all(lambda m: build_member(run, self.name, m, failed.get(m.id)), rest)
        built.update((m.id, where) for m, where in zip(rest, ended, strict=True))
        return {"built": {m.id: built[m.id] for m in members}}

    def revert(self, result, fence=None, **kwargs) -> None:
        built = result.get("built", {}) if isinstance(result, dict) else {}
        run_all(lambda s: destroy_built(s["id"], built.get(s["id"]), fence), self.servers)
        run_all(lambda v: delete_made(v["id"], built.get(v["id"]), fence), self.volumes)
        if self.volumes:
            with runtime.get().database.session() as session:
                session.execute(sa.update(Volume).where(
                    Volume.id.in_([v["id"] for v in self.volumes]))
                    .values(status=states.VOLUME_CREATING))
