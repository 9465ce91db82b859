"""Quotas: a project's limits (its own, else the ``[quota]`` defaults) and its usage."""

from __future__ import annotations

from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Quota


def _view(session, conf, tenant_id: str) -> dict:
    limits = rows.quota_for(session, tenant_id, conf.quota)
    return {"tenant_id": tenant_id, **limits,
            "default": session.get(Quota, tenant_id) is None,
            "usage": {**rows.usage(session, tenant_id),
                      **rows.volume_usage(session, tenant_id)}}


def show(database, conf, tenant_id: str) -> dict:
    """A project's limits, whether they are the defaults, and its usage."""
    with database.session() as session:
        return _view(session, conf, tenant_id)


def update(database, conf, tenant_id: str, changes: dict) -> dict:
    """Set the limits in ``changes``; the others keep their current value.

    A project's first limits copy the defaults of the instance limits not
    given; the volume limits are only written when given, and follow the
    defaults until then. Returns the project's quota as :func:`show` does.
    """
    with database.session() as session:
        current = rows.quota_for(session, tenant_id, conf.quota)
        limits = {key: current[key] for key in rows.INSTANCE_RESOURCES}
        limits.update(changes)
        rows.set_quota(session, tenant_id, limits)
        return _view(session, conf, tenant_id)
