"""Virtual clusters: the cluster, its members and groupings, as rows.

What a virtual cluster is for: docs/origins.md, "Virtual clusters".

A member is a row of ``vcluster_members`` naming the resource row that holds
its state: an :class:`Instance` for a server, a :class:`Volume` for a volume.
Each run of a vcluster flow (create, add, remove, delete) is recorded in
``VCluster.runs``; the members a run adds carry its flow id (``added_by``) so
a reverted update undoes exactly its own members.

Server-server groupings are also real server groups owned by the cluster
(``ServerGroup.vcluster_id``): an evacuation or any later move reads the same
rules as every other group, and joins and leaves them under the group lock.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.common import ids, states
from fleetflow.common.exceptions import Conflict, NotFound
from fleetflow.persistence import bulk
from fleetflow.persistence.models import (
    GroupMember,
    Instance,
    ServerGroup,
    VCluster,
    VClusterGrouping,
    VClusterMember,
    Volume,
    utcnow,
)
from fleetflow.persistence.reservations import INSTANCE_ROWS
from fleetflow.persistence.row_writes import RowWrites

SERVER, VOLUME = states.MEMBER_SERVER, states.MEMBER_VOLUME
ID_PREFIX = "vc-"
# A run writes each volume's row on its own (created, failed): through one statement.
VOLUME_ROWS = RowWrites(Volume.__table__)
# Server-server groupings become server groups with this policy and scope.
GROUP_POLICY = {"affinity": "affinity", "anti-affinity": "anti-affinity"}


def new_id() -> str:
    return ID_PREFIX + uuidlib.uuid4().hex[:12]


def get(session: orm.Session, vcluster_id: str, tenant_id: str | None = None,
        lock: bool = False) -> VCluster:
    """The vcluster, or NotFound (another tenant's included)."""
    query = sa.select(VCluster).where(VCluster.id == str(vcluster_id))
    if lock:
        query = query.with_for_update()
    vcluster = session.execute(query).scalar_one_or_none()
    if vcluster is None or (tenant_id is not None and vcluster.tenant_id != tenant_id):
        raise NotFound(f"vcluster {vcluster_id} not found")
    return vcluster


def find_by_idempotency_key(session: orm.Session, tenant_id: str, key: str) -> VCluster | None:
    return session.execute(sa.select(VCluster).where(
        VCluster.tenant_id == tenant_id, VCluster.idempotency_key == key)).scalar_one_or_none()


def take(session: orm.Session, vcluster: VCluster, status: str, expected: Iterable[str]) -> None:
    """Move ``vcluster`` to ``status`` only from one of ``expected`` (Conflict otherwise).

    A conditional UPDATE: of two requests racing to change one cluster, one wins.
    """
    expected = tuple(expected)
    done = session.execute(sa.update(VCluster).where(
        VCluster.id == vcluster.id, VCluster.status.in_(expected))
        .values(status=status, updated_at=utcnow())).rowcount
    if not done:
        session.refresh(vcluster)
        raise Conflict(f"vcluster {vcluster.id} is {vcluster.status}; try again once it has "
                       "settled", vcluster_id=vcluster.id, status=vcluster.status)
    vcluster.status = status


def set_status(session: orm.Session | sa.Connection, vcluster_id: str, status: str,
               fault: dict | None = None, clear_fault: bool = False) -> None:
    values = {"status": status, "updated_at": utcnow()}
    if fault is not None or clear_fault:
        values["fault"] = fault
    session.execute(sa.update(VCluster).where(VCluster.id == vcluster_id).values(**values))


def record_run(vcluster: VCluster, flow_id: str, kind: str, **details) -> None:
    vcluster.flow_id = flow_id
    vcluster.runs = [*vcluster.runs, {"flow_id": flow_id, "kind": kind, **details}]


def run_of(vcluster: VCluster, flow_id: str) -> dict:
    return next((run for run in vcluster.runs if run["flow_id"] == flow_id), {})


# -- members -----------------------------------------------------------------------

def next_indexes(session: orm.Session, vcluster_id: str) -> dict[str, int]:
    """The next free member index per kind (indexes are never reused)."""
    found = dict(session.execute(sa.select(VClusterMember.kind, sa.func.max(VClusterMember.index))
                                 .where(VClusterMember.vcluster_id == vcluster_id)
                                 .group_by(VClusterMember.kind)).all())
    return {kind: (found[kind] + 1 if found.get(kind) is not None else 0)
            for kind in states.MEMBER_KINDS}


def add_members(session: orm.Session, vcluster: VCluster, servers: list[dict],
                volumes: list[dict], flow_id: str | None
                ) -> dict[str, list[tuple[int, str, str]]]:
    """Member rows plus their PENDING instances and CREATING volumes, each table's
    rows in one statement (``bulk``: a create writes hundreds).

    ``servers``: ``{"name", "flavor_id", "image_id", "spec"}``; ``volumes``:
    ``{"name", "size_gb", "volume_type", "attach_to", "spec"}``. Returns the new
    members per kind, in the order given, as ``(index, name, resource id)`` (the
    flow's atom names derive from the indexes).
    """
    start = next_indexes(session, vcluster.id)
    now = utcnow()
    members, instances, volume_rows = [], [], []
    added: dict[str, list[tuple[int, str, str]]] = {SERVER: [], VOLUME: []}
    server_ids, volume_ids = ids.new_uuids(len(servers)), ids.new_uuids(len(volumes))
    for offset, server in enumerate(servers):
        index, resource_id = start[SERVER] + offset, server_ids[offset]
        added[SERVER].append((index, server["name"], resource_id))
        members.append({"vcluster_id": vcluster.id, "name": server["name"], "kind": SERVER,
                        "index": index, "resource_id": resource_id, "spec": server["spec"],
                        "attach_to": None, "added_by": flow_id, "removing": False})
        instances.append({"id": resource_id, "reservation_id": None,
                          "vcluster_id": vcluster.id, "tenant_id": vcluster.tenant_id,
                          "name": server["name"], "index": index, "status": states.PENDING,
                          "flavor_id": server["flavor_id"], "image_id": server["image_id"],
                          "group_id": None, "attempts": 0, "hosts_tried": [],
                          "created_at": now, "updated_at": now})
    for offset, volume in enumerate(volumes):
        index, resource_id = start[VOLUME] + offset, volume_ids[offset]
        added[VOLUME].append((index, volume["name"], resource_id))
        members.append({"vcluster_id": vcluster.id, "name": volume["name"], "kind": VOLUME,
                        "index": index, "resource_id": resource_id, "spec": volume["spec"],
                        "attach_to": volume.get("attach_to"), "added_by": flow_id,
                        "removing": False})
        volume_rows.append({"id": resource_id, "tenant_id": vcluster.tenant_id,
                            "name": volume["name"], "size_gb": int(volume["size_gb"]),
                            "volume_type": volume.get("volume_type"), "backend": None,
                            "status": states.VOLUME_CREATING, "instance_id": None,
                            "reservation_id": None, "vcluster_id": vcluster.id,
                            "created_at": now, "updated_at": now})
    bulk.insert(session, VClusterMember.__table__, members)
    bulk.insert(session, Instance.__table__, instances)
    bulk.insert(session, Volume.__table__, volume_rows)
    return added


def members(session: orm.Session, vcluster_id: str) -> list[VClusterMember]:
    return list(session.scalars(sa.select(VClusterMember).where(
        VClusterMember.vcluster_id == vcluster_id)
        .order_by(VClusterMember.kind, VClusterMember.index)))


def members_by_index(session: orm.Session, vcluster_id: str, kind: str,
                     indexes: Iterable[int]) -> list[VClusterMember]:
    return list(session.scalars(sa.select(VClusterMember).where(
        VClusterMember.vcluster_id == vcluster_id, VClusterMember.kind == kind,
        VClusterMember.index.in_(list(indexes))).order_by(VClusterMember.index)))


def members_of(session: orm.Session, vcluster_id: str, servers: Iterable[int],
               volumes: Iterable[int]) -> tuple[list[VClusterMember], list[VClusterMember]]:
    """The member rows of these server and volume indexes (a run's members)."""
    return (members_by_index(session, vcluster_id, SERVER, servers),
            members_by_index(session, vcluster_id, VOLUME, volumes))


def member(session: orm.Session, vcluster_id: str, kind: str, index: int) -> VClusterMember:
    found = session.execute(sa.select(VClusterMember).where(
        VClusterMember.vcluster_id == vcluster_id, VClusterMember.kind == kind,
        VClusterMember.index == index)).scalar_one_or_none()
    if found is None:
        raise NotFound(f"vcluster {vcluster_id}: no {kind} #{index}")
    return found


def drop_members(session: orm.Session, vcluster_id: str, names: Iterable[str]) -> None:
    """Forget members (their resource rows stay, REVERTED or DELETED, as history)
    and take them out of every grouping; a grouping left empty goes too."""
    names = set(names)
    if not names:
        return
    session.execute(sa.delete(VClusterMember).where(
        VClusterMember.vcluster_id == vcluster_id, VClusterMember.name.in_(names)))
    for grouping in groupings(session, vcluster_id):
        kept = [m for m in grouping.members if m not in names]
        if kept != list(grouping.members):
            grouping.members = kept
        if not kept:
            _drop_grouping(session, grouping)


# -- groupings ---------------------------------------------------------------------

def groupings(session: orm.Session, vcluster_id: str) -> list[VClusterGrouping]:
    return list(session.scalars(sa.select(VClusterGrouping).where(
        VClusterGrouping.vcluster_id == vcluster_id).order_by(VClusterGrouping.position)))


def grouping_dicts(rows: Iterable[VClusterGrouping]) -> list[dict]:
    """Groupings as plain data (what a run records to restore them on revert)."""
    return [{"name": g.name, "rule": g.rule, "scope": g.scope, "members": list(g.members)}
            for g in rows]


def set_groupings(session: orm.Session, vcluster: VCluster, wanted: list[dict],
                  server_names: set[str]) -> None:
    """Make the cluster's groupings exactly ``wanted`` (``{"name", "rule", "scope",
    "members"}``), with one owned server group per grouping of two servers or more.

    New groupings and groups are inserted in one statement each (``bulk``: a
    create writes a hundred or more)."""
    existing = {g.name: g for g in groupings(session, vcluster.id)}
    fresh, new_groups, now = [], [], utcnow()
    for position, want in enumerate(wanted):
        row = existing.pop(want["name"], None)
        group_id = row.server_group_id if row is not None else None
        if len([m for m in want["members"] if m in server_names]) > 1 and group_id is None:
            group_id = ids.new_uuid()
            new_groups.append({
                "id": group_id, "tenant_id": vcluster.tenant_id,
                "name": f"{vcluster.name}/{want['name']}"[:255],
                "policies": [GROUP_POLICY[want["rule"]]], "scope": want.get("scope") or "host",
                "capabilities": {}, "metadata": {"vcluster_id": vcluster.id},
                "vcluster_id": vcluster.id, "created_at": now, "updated_at": now})
        values = {"position": position, "rule": want["rule"], "scope": want.get("scope"),
                  "members": list(want["members"]), "server_group_id": group_id}
        if row is None:
            fresh.append({"vcluster_id": vcluster.id, "name": want["name"], **values})
        else:
            for key, value in values.items():
                setattr(row, key, value)
    bulk.insert(session, ServerGroup.__table__, new_groups)
    bulk.insert(session, VClusterGrouping.__table__, fresh)
    for row in existing.values():
        _drop_grouping(session, row)
    session.flush()


def _drop_grouping(session: orm.Session, row: VClusterGrouping) -> None:
    if row.server_group_id:
        session.execute(sa.delete(GroupMember).where(GroupMember.group_id == row.server_group_id))
        session.execute(sa.delete(ServerGroup).where(ServerGroup.id == row.server_group_id))
    session.delete(row)


def server_groups_of(session: orm.Session, vcluster_id: str) -> dict[str, list[str]]:
    """Server member name -> the owned server groups it belongs to, in grouping order."""
    result: dict[str, list[str]] = {}
    for grouping in groupings(session, vcluster_id):
        if grouping.server_group_id:
            for name in grouping.members:
                result.setdefault(name, []).append(grouping.server_group_id)
    return result


def sync_group_ids(session: orm.Session, vcluster_id: str,
                   groups_of: dict[str, list[str]] | None = None) -> None:
    """Each server's ``group_id`` hint: its first owned group, or None.

    Code that reads one group per instance (the evacuation's placer, its
    fast path that leaves grouped servers to the per-server claims) sees the
    cluster's servers as grouped; the claims check every group they are in.
    ``groups_of``: :func:`server_groups_of`, when the caller has read it.
    """
    if groups_of is None:
        groups_of = server_groups_of(session, vcluster_id)
    first = {name: group_ids[0] for name, group_ids in groups_of.items()}
    INSTANCE_ROWS.update_each(session, {m.resource_id: {"group_id": first.get(m.name)}
                                        for m in members(session, vcluster_id)
                                        if m.kind == SERVER})


def delete_owned_groups(session: orm.Session, vcluster_id: str) -> None:
    group_ids = list(session.scalars(sa.select(ServerGroup.id).where(
        ServerGroup.vcluster_id == vcluster_id)))
    if group_ids:
        session.execute(sa.delete(GroupMember).where(GroupMember.group_id.in_(group_ids)))
        session.execute(sa.delete(ServerGroup).where(ServerGroup.id.in_(group_ids)))
    session.execute(sa.update(VClusterGrouping).where(
        VClusterGrouping.vcluster_id == vcluster_id).values(server_group_id=None))
    sync_group_ids(session, vcluster_id)
