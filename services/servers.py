"""Servers (instances) one by one: one of a project, the pages of its list or of every
project's for operators.

The project's list (``GET /v2/{project}/servers``) and the operator's
(``GET /v2/admin/servers``, or the project's with ``all_tenants=1`` as in Nova)
are the same query, with or without the project: one function, so that both
filter and page alike.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common import ids, states
from fleetflow.persistence import paging
from fleetflow.persistence.models import Instance


def list_page(database, *, limit: int, marker: str | None = None,
              tenant_id: str | None = None, reservation_id: str | None = None,
              status: str | None = None, host: str | None = None) -> tuple[list[Instance], bool]:
    """``(servers, more)``: one page, newest first.

    ``tenant_id`` None lists every project's. Filters combine (AND); deleted
    servers are left out unless ``status`` is DELETED. The marker must be a
    server of the listed projects (InvalidInput naming ``marker`` otherwise).
    """
    scope = () if tenant_id is None else (Instance.tenant_id == tenant_id,)
    stmt = sa.select(Instance).where(*scope)
    if reservation_id is not None:
        stmt = stmt.where(Instance.reservation_id == reservation_id)
    if status is not None:
        stmt = stmt.where(Instance.status == status)
    else:
        stmt = stmt.where(Instance.status != states.DELETED)
    if host is not None:
        stmt = stmt.where(Instance.host == host)
    with database.session() as session:
        return paging.newest_first(session, stmt, Instance, limit, marker, scope)


def get(database, tenant_id: str, server_id: str) -> Instance | None:
    """The project's server ``server_id`` (a uuid) whatever its status; None otherwise."""
    if not ids.is_uuid(server_id):
        return None
    with database.session() as session:
        instance = session.get(Instance, server_id)
    if instance is None or instance.tenant_id != tenant_id:
        return None
    return instance
