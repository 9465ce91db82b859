"""What the API shows of a vcluster: members where they landed, groupings holding.

Built from rows in a few queries (members, their instances and volumes, the
hosts and backends they are on), never from TaskFlow's atom details.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.common import states
from fleetflow.persistence import paging
from fleetflow.persistence import vclusters as rows
from fleetflow.persistence.models import (
    Instance,
    VCluster,
    VClusterMember,
    Volume,
)
from fleetflow.scheduler.vcluster.check import holds
from fleetflow.scheduler.vcluster.plan import backend_places, host_places
from fleetflow.services.final_progress import FinalProgress

SERVER, VOLUME = states.MEMBER_SERVER, states.MEMBER_VOLUME
ACTIVE_VOLUME = (states.VOLUME_AVAILABLE, states.VOLUME_IN_USE)
BUILDING = (states.PENDING, states.SCHEDULING, states.BUILDING, states.REVERTING,
            states.VOLUME_CREATING, states.DELETING)
ERROR = (states.ERROR, states.VOLUME_ERROR)


def _progress(counts: Mapping[str | None, int]) -> dict[str, int]:
    """The progress of members counted by status (``{status: members}``)."""
    return {"total": sum(counts.values()),
            "active": sum(n for s, n in counts.items()
                          if s == states.ACTIVE or s in ACTIVE_VOLUME),
            "building": sum(n for s, n in counts.items() if s in BUILDING),
            "error": sum(n for s, n in counts.items() if s in ERROR)}


def member_items(session, vcluster_id: str) -> list[dict]:
    """Each member: name, type, id, status, host or backend, attached_to, fault."""
    members = rows.members(session, vcluster_id)
    ids = [m.resource_id for m in members]
    instances = {i.id: i for i in session.scalars(sa.select(Instance).where(
        Instance.id.in_([m.resource_id for m in members if m.kind == SERVER])))}
    volumes = {v.id: v for v in session.scalars(sa.select(Volume).where(Volume.id.in_(ids)))}
    names = {m.resource_id: m.name for m in members}
    items = []
    for m in members:
        if m.kind == SERVER:
            row = instances.get(m.resource_id)
            items.append({"name": m.name, "type": SERVER, "id": m.resource_id,
                          "status": row.status if row else None,
                          "host": row.host if row else None, "attached_to": None,
                          "fault": row.fault if row else None})
        else:
            row = volumes.get(m.resource_id)
            attached = names.get(row.instance_id) if row and row.instance_id else None
            items.append({"name": m.name, "type": VOLUME, "id": m.resource_id,
                          "status": row.status if row else None,
                          "backend": row.backend if row else None,
                          "attached_to": attached or None, "fault": row.fault if row else None})
    return items


def grouping_items(session, vcluster_id: str, items: list[dict]) -> list[dict]:
    hosts = host_places(session, [i.get("host") for i in items if i["type"] == SERVER])
    backends = backend_places(session, [i.get("backend") for i in items if i["type"] == VOLUME])
    live = (states.ACTIVE, states.BUILDING, states.VOLUME_AVAILABLE, states.VOLUME_IN_USE,
            states.VOLUME_CREATING)
    servers = {i["name"]: hosts.get(i["host"]) if i["status"] in live else None
               for i in items if i["type"] == SERVER}
    volumes = {i["name"]: backends.get(i["backend"]) if i["status"] in live else None
               for i in items if i["type"] == VOLUME}
    result = []
    for g in rows.groupings(session, vcluster_id):
        satisfied, domains = holds(g.rule, g.scope, g.members, servers, volumes)
        result.append({"name": g.name, "rule": g.rule, "scope": g.scope,
                       "membersRef": list(g.members), "satisfied": satisfied,
                       "domains": domains})
    return result


def show(session, vcluster: VCluster) -> dict:
    items = member_items(session, vcluster.id)
    return {"id": vcluster.id, "name": vcluster.name, "status": vcluster.status,
            "flow_id": vcluster.flow_id, "created_at": vcluster.created_at,
            "updated_at": vcluster.updated_at,
            "progress": _progress(Counter(i["status"] for i in items)),
            "instances": items, "groupings": grouping_items(session, vcluster.id, items),
            "fault": vcluster.fault, "queue": _queue(session, vcluster)}


def _queue(session, vcluster: VCluster) -> dict | None:
    """Where a QUEUED cluster stands (services/queue/views.py); None otherwise."""
    if vcluster.status != states.QUEUED:
        return None
    from fleetflow.services.queue import views

    return views.entry_view(session, views.queue_rows.KIND_VCLUSTER, vcluster.id)


def summaries(session, tenant_id: str | None, status: str | None, limit: int,
              marker: str | None, final: FinalProgress | None = None) -> list[dict]:
    """A page of clusters, newest first, with their progress (no members).

    ``final``: the progress of DELETED clusters counted before, which is kept
    there. NotFound when ``marker`` names no cluster of the tenant.
    """
    # Not the request body nor the runs: a cluster of thousands carries them
    # as large JSON documents that no summary shows.
    query = sa.select(VCluster).options(orm.defer(VCluster.request), orm.defer(VCluster.runs))
    if tenant_id is not None:
        query = query.where(VCluster.tenant_id == tenant_id)
    if status:
        query = query.where(VCluster.status == status)
    if marker:
        rows.get(session, marker, tenant_id)
    clusters, _more = paging.newest_first(session, query, VCluster, limit, marker)
    final = final if final is not None else FinalProgress()
    known = final.known(c.id for c in clusters if c.status == states.DELETED)
    counts: dict[str, Counter] = {c.id: Counter() for c in clusters if c.id not in known}
    if counts:
        for vcluster_id, status_, members in session.execute(
                _MEMBER_STATUSES, {"ids": list(counts)}):
            counts[vcluster_id][status_] += members
    progress = {vcluster_id: _progress(c) for vcluster_id, c in counts.items()}
    final.remember({c.id: progress[c.id] for c in clusters
                    if c.status == states.DELETED and c.id in progress})
    progress.update(known)
    return [{"id": c.id, "name": c.name, "status": c.status, "flow_id": c.flow_id,
             "created_at": c.created_at, "updated_at": c.updated_at,
             "progress": progress[c.id], "fault": c.fault} for c in clusters]


# ``(cluster id, status, members)`` of the clusters ``ids``, servers and volumes:
# counted by the database, for a list polled while a cluster of thousands builds.
# Built once: a poll pays neither its construction nor its cache key.
_MEMBER_STATUSES = sa.union_all(*(
    sa.select(VClusterMember.vcluster_id, model.status, sa.func.count())
    .join(model, model.id == VClusterMember.resource_id)
    .where(VClusterMember.vcluster_id.in_(sa.bindparam("ids", expanding=True)))
    .group_by(VClusterMember.vcluster_id, model.status)
    for model in (Instance, Volume)))


def dry_run_view(session, checked, placement) -> dict:
    """``fits``, where each member would go (with alternates) and each grouping's domains."""
    instances = [{"name": s.name, "type": SERVER, "host": placement.host_of(s.name),
                  "alternates": placement.hosts.get(s.name, [])[1:]}
                 for s in checked.cluster.servers]
    instances += [{"name": v.name, "type": VOLUME, "backend": placement.backend_of(v.name),
                   "alternates": placement.backends.get(v.name, [])[1:],
                   "attached_to": placement.attachments.get(v.name)}
                  for v in checked.cluster.volumes]
    groupings = [{"name": g.name, "rule": g.rule, "scope": g.scope,
                  "membersRef": list(g.members), "satisfied": placement.fits,
                  "domains": {m: _text(d) for m, d in placement.domains.get(g.name, {}).items()}}
                 for g in checked.cluster.groupings]
    return {"fits": placement.fits, "explanation": placement.explanation,
            "instances": instances, "groupings": groupings}


def _text(domain):
    return domain if domain is None or isinstance(domain, str) else "/".join(map(str, domain))
