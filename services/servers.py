"""Servers (instances) one by one: one of a project, the pages of its list or of every
project's for operators; a server's metadata.

The project's list (``GET /v2/{project}/servers``) and the operator's
(``GET /v2/admin/servers``, or the project's with ``all_tenants=1`` as in Nova)
are the same query, with or without the project: one function, so that both
filter and page alike.

A server's metadata is Nova's: string keys and values, read and written
whole (PUT replaces, POST merges, DELETE of one key). Automatic recovery
reads ``ha``, ``recovery`` and ``recovery_priority`` in it (docs/recovery.md).
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common import ids, states
from fleetflow.common.exceptions import InvalidInput, NotFound
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
    with database.read_session() as session:
        return paging.newest_first(session, stmt, Instance, limit, marker, scope)


def get(database, tenant_id: str, server_id: str) -> Instance | None:
    """The project's server ``server_id`` (a uuid) whatever its status; None otherwise."""
    if not ids.is_uuid(server_id):
        return None
    with database.read_session() as session:
        instance = session.get(Instance, server_id)
    if instance is None or instance.tenant_id != tenant_id:
        return None
    return instance


# Nova's bounds: at most this many items (its metadata_items quota's default),
# keys of 1 to 255 characters, values of at most 255.
MAX_METADATA_ITEMS = 128
MAX_METADATA_LENGTH = 255


def check_metadata(metadata: dict) -> dict[str, str]:
    """``metadata`` as ``{str: str}`` within Nova's bounds, or InvalidInput."""
    if len(metadata) > MAX_METADATA_ITEMS:
        raise InvalidInput(f"metadata: at most {MAX_METADATA_ITEMS} items",
                           field="metadata")
    for key, value in metadata.items():
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_METADATA_LENGTH:
            raise InvalidInput(f"metadata: keys are 1 to {MAX_METADATA_LENGTH} characters",
                               field="metadata")
        if not isinstance(value, str) or len(value) > MAX_METADATA_LENGTH:
            raise InvalidInput(f"metadata: {key}: a string of at most "
                               f"{MAX_METADATA_LENGTH} characters", field="metadata")
    return dict(metadata)


def get_metadata(database, tenant_id: str, server_id: str) -> dict[str, str]:
    """The metadata of the project's server; NotFound for an unknown or deleted one."""
    with database.read_session() as session:
        return dict(_live(session, tenant_id, server_id).metadata_ or {})


def update_metadata(database, tenant_id: str, server_id: str, metadata: dict | None = None,
                    *, replace: bool = False, remove: tuple[str, ...] = ()) -> dict[str, str]:
    """Merge ``metadata`` into the server's (``replace``: instead of it), drop ``remove``.

    The row is locked while it changes: two merges never lose one another's
    keys. Nothing is written when the result breaks the bounds. Returns the
    metadata now. NotFound for an unknown or deleted server, or a key of
    ``remove`` it does not have (as Nova's DELETE of a key).
    """
    with database.session() as session:
        server = _live(session, tenant_id, server_id, lock=True)
        current = {} if replace else dict(server.metadata_ or {})
        current.update(metadata or {})
        for key in remove:
            if key not in current:
                raise NotFound(f"Server {server_id} has no metadata key {key}.",
                               server_id=server_id)
            del current[key]
        server.metadata_ = check_metadata(current)
        return dict(current)


def _live(session, tenant_id: str, server_id: str, lock: bool = False) -> Instance:
    found = None
    if ids.is_uuid(server_id):
        query = sa.select(Instance).where(Instance.id == server_id,
                                          Instance.tenant_id == tenant_id,
                                          Instance.status != states.DELETED)
        found = session.scalars(query.with_for_update() if lock else query).first()
    if found is None:
        raise NotFound(f"Server {server_id} does not exist.", server_id=server_id)
    return found
