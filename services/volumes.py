"""Volumes of a project, read-only: the flows of what owns them make and delete them."""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.config import openstack_mode
from fleetflow.common.exceptions import InvalidInput
from fleetflow.persistence import paging
from fleetflow.persistence.models import Volume


def refuse_in_openstack_mode(conf, field: str) -> None:
    """A clear 400 for a volume asked of a real cloud: fleetflow does not drive Cinder yet."""
    if openstack_mode(conf):
        raise InvalidInput(f"{field}: volumes need Cinder, which fleetflow does not drive "
                           "yet ([cloud] driver = openstack); ask for servers only",
                           field=field)


def list_page(database, tenant_id: str, *, limit: int, marker: str | None = None,
              vcluster_id: str | None = None,
              status: str | None = None) -> tuple[list[Volume], bool]:
    """``(volumes, more)``: one page of the project's volumes, newest first.

    Filters combine (AND); deleted volumes are left out unless ``status`` is
    DELETED. The marker must be a volume of the project (InvalidInput naming
    ``marker`` otherwise).
    """
    scope = (Volume.tenant_id == tenant_id,)
    stmt = sa.select(Volume).where(*scope)
    if vcluster_id is not None:
        stmt = stmt.where(Volume.vcluster_id == vcluster_id)
    if status is not None:
        stmt = stmt.where(Volume.status == status)
    else:
        stmt = stmt.where(Volume.status != states.VOLUME_DELETED)
    with database.session() as session:
        return paging.newest_first(session, stmt, Volume, limit, marker, scope)


def get(database, tenant_id: str, volume_id: str) -> Volume | None:
    """The project's volume ``volume_id`` whatever its status; None for another's."""
    with database.session() as session:
        volume = session.get(Volume, volume_id)
    if volume is None or volume.tenant_id != tenant_id:
        return None
    return volume
