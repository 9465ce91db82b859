"""Server groups of a project: placement rules shared by instances.

Members are read-only here: an instance joins the group named by its
reservation's ``group_id`` when it is claimed, and leaves when it is deleted.
Name and metadata change at any time, the rules (:data:`RULES`) only while
the group is empty; a group with members cannot be deleted (Conflict). Another
project's group is NotFound, as if it did not exist. What is returned has its
members loaded, so it can be shown once the session is closed.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.persistence import groups as group_rows
from fleetflow.persistence import paging
from fleetflow.persistence.models import ServerGroup

POLICIES = group_rows.POLICIES
SCOPES = group_rows.SCOPES
# Attributes that may only change while the group has no member.
RULES = ("policies", "scope", "max_per_host", "capabilities")


def _loaded(group: ServerGroup) -> ServerGroup:
    """Load what the response shows while the session is still open."""
    group.members  # noqa: B018 - the relationship loads on first access
    return group


def list_page(database, tenant_id: str, *, limit: int, marker: str | None = None,
              name: str | None = None) -> tuple[list[ServerGroup], bool]:
    """``(groups, more)``: one page of the project's groups, newest first.

    The marker must be a group of the project (InvalidInput naming ``marker``).
    """
    scope = (ServerGroup.tenant_id == tenant_id,)
    stmt = sa.select(ServerGroup).where(*scope)
    if name is not None:
        stmt = stmt.where(ServerGroup.name == name)
    with database.read_session() as session:
        groups, more = paging.newest_first(session, stmt, ServerGroup, limit, marker, scope)
        return [_loaded(g) for g in groups], more


def create(database, tenant_id: str, fields: dict) -> ServerGroup:
    """A new empty group of the project with the attributes in ``fields``."""
    with database.session() as session:
        return _loaded(group_rows.create(
            session, tenant_id, fields.get("name"), fields["policies"],
            scope=fields["scope"], max_per_host=fields.get("max_per_host"),
            metadata=fields.get("metadata"), capabilities=fields.get("capabilities")))


def get(database, tenant_id: str, group_id: str) -> ServerGroup:
    """The project's group ``group_id`` with its members (NotFound otherwise)."""
    with database.read_session() as session:
        return _loaded(group_rows.get(session, group_id, tenant_id))


def update(database, tenant_id: str, group_id: str, fields: dict) -> ServerGroup:
    """Change the attributes in ``fields``; rules only while the group is empty."""
    fields = dict(fields)
    with database.session() as session:
        group = group_rows.get(session, group_id, tenant_id)
        # NOTE: a client that reads a group and sends it back whole with a
        # new name repeats the rules unchanged; that is not a change of
        # rules, so it must not be refused because the group has members.
        for name in RULES:
            if name in fields and fields[name] == getattr(group, name):
                del fields[name]
        return _loaded(group_rows.update(session, group, **fields))


def delete(database, tenant_id: str, group_id: str) -> None:
    """Delete the project's group ``group_id`` (Conflict while it has members)."""
    with database.session() as session:
        group_rows.delete(session, group_rows.get(session, group_id, tenant_id))
