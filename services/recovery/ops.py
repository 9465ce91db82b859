"""Automatic recovery as operators see and steer it (API service ``recoveries``).

Reads the monitor's rows (each detection with its timeline), pauses and
resumes automatic action cluster-wide, and answers the dry run "what would
happen if host H died now" with the plan an evacuation would make.
"""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.exceptions import InvalidInput, NotFound
from fleetflow.persistence import recoveries as rows
from fleetflow.persistence.models import utcnow
from fleetflow.services.recovery import detect, policy

# The length of a project id everywhere (the tenant_id columns).
PROJECT_ID_LENGTH = 64


class RecoveryOps:
    """``evacuations``: services.evacuations.EvacuationOps, for the dry run."""

    def __init__(self, conf, database, evacuations=None):
        self.conf = conf
        self.database = database
        self.evacuations = evacuations

    def status(self) -> dict:
        """Whether the monitor may act, and the storm guard's view of the fleet now."""
        with self.database.session() as session:
            switch = rows.control(session)
            zones, fleet = detect.storm(session, self.conf, utcnow())
            return {"enabled": bool(self.conf.recovery.enabled), "paused": switch.paused,
                    "reason": switch.reason, "user_id": switch.user_id,
                    "updated_at": switch.updated_at,
                    "storm": {"fleet": fleet, "zones": sorted(zones),
                              "max_dead_fraction": self.conf.recovery.max_dead_fraction}}

    def list(self, *, limit: int, marker: str | None = None, host: str | None = None,
             status: str | None = None) -> tuple[list[dict], str | None]:
        """Views without timelines, newest first; the marker of the next page or None."""
        query = sa.select(rows.Recovery).order_by(rows.Recovery.suspect_at.desc(),
                                                  rows.Recovery.id.desc())
        if host:
            query = query.where(rows.Recovery.host == host)
        if status:
            query = query.where(rows.Recovery.status == status)
        with self.database.read_session() as session:
            if marker:
                anchor = rows.get(session, marker)
                if anchor is None:
                    raise InvalidInput(f"marker: no recovery {marker}", field="marker")
                query = query.where(sa.or_(
                    rows.Recovery.suspect_at < anchor.suspect_at,
                    sa.and_(rows.Recovery.suspect_at == anchor.suspect_at,
                            rows.Recovery.id < anchor.id)))
            found = list(session.scalars(query.limit(limit + 1)))
            page = found[:limit]
            return ([rows.view(r) for r in page],
                    page[-1].id if len(found) > limit else None)

    def show(self, recovery_id: str) -> dict:
        with self.database.read_session() as session:
            recovery = rows.get(session, recovery_id)
            if recovery is None:
                raise NotFound(f"Recovery {recovery_id} does not exist.",
                               recovery_id=recovery_id)
            return rows.view(recovery)

    def set_paused(self, paused: bool, reason: str | None = None,
                   user_id: str | None = None) -> dict:
        """Stop (or restart) every automatic fence and evacuation; detection goes on."""
        with self.database.session() as session:
            switch = rows.control(session)
            switch.paused, switch.reason, switch.user_id = paused, reason, user_id
            switch.updated_at = utcnow()
        return self.status()

    def projects(self) -> list[dict]:
        """Every project's override of ``[recovery] servers``, by project."""
        with self.database.read_session() as session:
            return [rows.project_view(r) for r in session.scalars(
                sa.select(rows.RecoveryProject).order_by(rows.RecoveryProject.project_id))]

    def project(self, project_id: str) -> dict:
        """The project's choice: its override, or ``[recovery] servers`` (``default``)."""
        with self.database.read_session() as session:
            row = session.get(rows.RecoveryProject, project_id)
            if row is not None:
                return rows.project_view(row) | {"default": False}
        return {"project_id": project_id, "servers": self.conf.recovery.servers,
                "reason": None, "user_id": None, "updated_at": None, "default": True}

    def set_project(self, project_id: str, servers: str, reason: str | None = None,
                    user_id: str | None = None) -> dict:
        """Which servers of the project a recovery moves: all, ha (ha=true only) or none."""
        if not 1 <= len(project_id) <= PROJECT_ID_LENGTH:
            raise InvalidInput(f"project: 1 to {PROJECT_ID_LENGTH} characters",
                               field="project_id")
        if servers not in rows.PROJECT_SERVERS:
            raise InvalidInput(f"servers: one of {', '.join(rows.PROJECT_SERVERS)}",
                               field="servers")
        with self.database.session() as session:
            rows.set_project(session, project_id, servers, reason, user_id)
        return self.project(project_id)

    def clear_project(self, project_id: str) -> dict:
        """Back to ``[recovery] servers`` for the project (nothing to clear is no error)."""
        with self.database.session() as session:
            session.execute(sa.delete(rows.RecoveryProject).where(
                rows.RecoveryProject.project_id == project_id))
        return self.project(project_id)

    def plan(self, host: str) -> dict:
        """What a recovery of ``host`` would do now: which servers move where, which stay."""
        from fleetflow.services.evacuations import EvacuationRequest
        from fleetflow.services.hosts import get_host

        with self.database.read_session() as session:
            found = get_host(session, host)
            zone = found.zone
            moving, staying = policy.servers(session, self.conf, [host])
            targets = None
            where = self.conf.recovery.where
            if where == "zone":
                targets = policy.zone_hosts(session, zone, [host]) or None
            elif where == "reserve":
                targets = [h.name for h in policy.reserve_hosts(session, self.conf)
                           if h.name != host] or None
        verdict = {"fits": True, "instances": []}
        if moving and self.evacuations is not None:
            request = EvacuationRequest(hosts=[host], mode=states.MODE_REBUILD,
                                        target_hosts=targets, instances=moving)
            # The reserve pool waits in maintenance: a recovery would bring it up.
            as_up = tuple(targets or ()) if where == "reserve" else ()
            verdict = self.evacuations.dry_run(request, as_up=as_up)
            if not verdict["fits"] and where == "reserve" and targets:
                # Reserve hosts first, any host when they are not enough.
                verdict = self.evacuations.dry_run(
                    dataclasses.replace(request, target_hosts=None), as_up=as_up)
        order = {uuid: n for n, uuid in enumerate(moving)}
        verdict["instances"].sort(key=lambda i: order.get(i["id"], len(order)))
        return {"host": host, "zone": zone, "where": where, "fits": verdict["fits"],
                "instances": verdict["instances"],
                "staying": [{"id": uuid, "why": why} for uuid, why in sorted(staying.items())],
                "paused": self.status()["paused"], "enabled": bool(self.conf.recovery.enabled)}

