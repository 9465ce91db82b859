"""Server groups: CRUD rules and membership (docs/origins.md, "Server groups").

Membership is read-only through the API: an instance joins when it is claimed
with a ``group_id`` hint and leaves when it is deleted or its claim is
reverted. Joining happens under the group's row lock (``lock``), so two
conductors placing members of one anti-affinity group at the same moment
check the rule one after the other, never both against the same old view.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.common import ids
from fleetflow.common.exceptions import Conflict, InvalidInput, NotFound
from fleetflow.persistence.models import GroupMember, ServerGroup

POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity",
            "network-proximity", "host-capabilities")
SCOPES = ("host", "rack", "zone")
# Policies that cannot hold together on one group.
_EXCLUSIVE = ({"affinity", "anti-affinity"}, {"affinity", "soft-anti-affinity"},
              {"anti-affinity", "soft-affinity"}, {"soft-affinity", "soft-anti-affinity"},
              {"anti-affinity", "network-proximity"})


def validate_policies(policies: list[str], capabilities: dict | None = None) -> None:
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise InvalidInput(f"policies: unknown policy {unknown[0]!r}; "
                           f"choose from {', '.join(POLICIES)}", field="policies")
    if len(set(policies)) != len(policies):
        raise InvalidInput("policies: a policy is listed twice", field="policies")
    for pair in _EXCLUSIVE:
        if pair <= set(policies):
            a, b = sorted(pair)
            raise InvalidInput(f"policies: {a} and {b} contradict each other",
                               field="policies")
    if "host-capabilities" in policies and not capabilities:
        raise InvalidInput("capabilities: the host-capabilities policy needs capability "
                           "requirements", field="capabilities")


def get(session: orm.Session, group_id: str, tenant_id: str | None = None) -> ServerGroup:
    """The group, or NotFound; another tenant's group is NotFound too."""
    group = session.get(ServerGroup, group_id) if ids.is_uuid(group_id) else None
    if group is None or (tenant_id is not None and group.tenant_id != tenant_id):
        raise NotFound(f"server group {group_id} not found")
    return group


def create(session: orm.Session, tenant_id: str, name: str | None, policies: list[str],
           scope: str = "host", max_per_host: int | None = None,
           metadata: dict | None = None, capabilities: dict | None = None) -> ServerGroup:
    validate_policies(policies, capabilities)
    if scope not in SCOPES:
        raise InvalidInput(f"scope: must be one of {', '.join(SCOPES)}", field="scope")
    group = ServerGroup(id=ids.new_uuid(), tenant_id=tenant_id, name=name,
                        policies=list(policies), scope=scope, max_per_host=max_per_host,
                        metadata_=dict(metadata or {}), capabilities=dict(capabilities or {}))
    session.add(group)
    session.flush()
    return group


def _owned(group: ServerGroup) -> None:
    """A virtual cluster's group changes with its cluster only (Conflict otherwise)."""
    if group.vcluster_id:
        raise Conflict(f"server group {group.id} belongs to vcluster {group.vcluster_id}: "
                       "change its groupings through the vcluster",
                       vcluster_id=group.vcluster_id)


def update(session: orm.Session, group: ServerGroup, **changes) -> ServerGroup:
    """Name and metadata change always; the rules only while the group is empty."""
    _owned(group)
    rules = {k: changes[k] for k in ("policies", "scope", "max_per_host", "capabilities")
             if k in changes}
    if rules:
        lock(session, group.id)
        if member_count(session, group.id):
            raise Conflict(f"server group {group.id} has members: its policies can only "
                           "change while it is empty")
        policies = rules.get("policies", group.policies)
        validate_policies(policies, rules.get("capabilities", group.capabilities))
        if rules.get("scope", group.scope) not in SCOPES:
            raise InvalidInput(f"scope: must be one of {', '.join(SCOPES)}", field="scope")
    for key in ("name", "policies", "scope", "max_per_host", "capabilities"):
        if key in changes:
            setattr(group, key, changes[key])
    if "metadata" in changes:
        group.metadata_ = dict(changes["metadata"] or {})
    session.flush()
    return group


def delete(session: orm.Session, group: ServerGroup) -> None:
    _owned(group)
    lock(session, group.id)
    if member_count(session, group.id):
        raise Conflict(f"server group {group.id} has members; delete them first")
    session.delete(group)
    session.flush()


def lock(session: orm.Session, group_id: str) -> ServerGroup:
    """Take the group's row lock for the rest of the transaction.

    On PostgreSQL this is SELECT ... FOR UPDATE. SQLite transactions already
    hold the database's write lock from their start (BEGIN IMMEDIATE), which
    serialises joins just the same.
    """
    group = session.execute(
        sa.select(ServerGroup).where(ServerGroup.id == group_id).with_for_update()
    ).scalar_one_or_none()
    if group is None:
        raise NotFound(f"server group {group_id} not found")
    return group


def lock_many(session: orm.Session, group_ids: list[str]) -> dict[str, ServerGroup]:
    """:func:`lock` for many groups in one statement, taken in id order."""
    found = {g.id: g for g in session.scalars(
        sa.select(ServerGroup).where(ServerGroup.id.in_(group_ids))
        .order_by(ServerGroup.id).with_for_update())}
    missing = sorted(set(group_ids) - set(found))
    if missing:
        raise NotFound(f"server group {missing[0]} not found")
    return found


def member_count(session: orm.Session, group_id: str) -> int:
    return session.scalar(sa.select(sa.func.count()).select_from(GroupMember)
                          .where(GroupMember.group_id == group_id)) or 0


def member_hosts(session: orm.Session, group_id: str,
                 exclude_instance: str | None = None) -> dict[str, str | None]:
    """instance id -> host of every member (host None while not yet placed)."""
    query = sa.select(GroupMember.instance_id, GroupMember.host).where(
        GroupMember.group_id == group_id)
    if exclude_instance:
        query = query.where(GroupMember.instance_id != exclude_instance)
    return dict(session.execute(query).all())


def groups_of(session: orm.Session, instance_id: str, group_id: str | None = None
              ) -> list[str]:
    """Every group the instance is a member of (a vcluster's server may be in
    several), with ``group_id`` (its row's hint) among them, sorted: locks are
    taken in this order, so two claims never wait on each other in a cycle."""
    found = set(session.scalars(sa.select(GroupMember.group_id).where(
        GroupMember.instance_id == instance_id)))
    if group_id:
        found.add(group_id)
    return sorted(found)


def join(session: orm.Session, group_id: str, instance_id: str, host: str | None) -> None:
    """Record (or move) ``instance_id`` as a member on ``host``; idempotent."""
    member = session.execute(sa.select(GroupMember).where(
        GroupMember.group_id == group_id,
        GroupMember.instance_id == instance_id)).scalar_one_or_none()
    if member is None:
        session.add(GroupMember(group_id=group_id, instance_id=instance_id, host=host))
    else:
        member.host = host
    session.flush()


def members_placed(session: orm.Session, group_ids: list[str]) -> dict[str, dict[str, str]]:
    """Group id -> {instance id: host} of its members that have a host."""
    found: dict[str, dict[str, str]] = {g: {} for g in group_ids}
    for group_id, instance_id, host in session.execute(
            sa.select(GroupMember.group_id, GroupMember.instance_id, GroupMember.host)
            .where(GroupMember.group_id.in_(group_ids), GroupMember.host.is_not(None))):
        found[group_id][instance_id] = host
    return found


def join_all(session: orm.Session, wanted: dict[str, dict[str, str | None]]) -> None:
    """:func:`join` for many instances of many groups (``{group_id: {instance_id:
    host}}``): one read, one insert of the new members, an update a member that moved."""
    known = {(g, i): h for g, i, h in session.execute(
        sa.select(GroupMember.group_id, GroupMember.instance_id, GroupMember.host)
        .where(GroupMember.group_id.in_(list(wanted)),
               GroupMember.instance_id.in_({i for hosts in wanted.values() for i in hosts})))}
    fresh = [{"group_id": g, "instance_id": i, "host": h}
             for g, hosts in wanted.items() for i, h in hosts.items() if (g, i) not in known]
    if fresh:
        session.execute(sa.insert(GroupMember), fresh)
    for (group_id, instance_id), host in known.items():
        if wanted[group_id][instance_id] != host:
            session.execute(sa.update(GroupMember).where(
                GroupMember.group_id == group_id, GroupMember.instance_id == instance_id)
                .values(host=wanted[group_id][instance_id]))


def leave(session: orm.Session, instance_id: str, group_id: str | None = None,
          host: str | None = None) -> int:
    """Remove the instance from its group(s); with ``host``, only if it is there."""
    query = sa.delete(GroupMember).where(GroupMember.instance_id == instance_id)
    if group_id:
        query = query.where(GroupMember.group_id == group_id)
    if host is not None:
        query = query.where(GroupMember.host == host)
    return session.execute(query).rowcount or 0


def leave_all(session: orm.Session, instance_ids: list[str]) -> int:
    """:func:`leave` of every group for many instances, in one statement."""
    if not instance_ids:
        return 0
    return session.execute(sa.delete(GroupMember).where(
        GroupMember.instance_id.in_(list(instance_ids)))).rowcount or 0
