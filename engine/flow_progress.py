"""When each flow last made progress: the last writes of its flow detail and its atoms.

A state alone does not tell an operator which flows are stuck: a RUNNING flow
whose last checkpoint is an hour old is, one written a second ago is not.
fleetflow's logbook backend stamps every write of a flow or atom detail
(``updated_at``); TaskFlow's in-memory backend keeps no such time (None).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.replace(tzinfo=dt.UTC).isoformat()


def progress(backend, flow_ids: list[str]) -> dict[str, dict]:
    """``{flow id: {"updated_at", "last_progress_at"}}`` (ISO 8601, UTC) of a page of flows.

    ``updated_at`` is the flow detail's last write (its state, a pause);
    ``last_progress_at`` the latest of it and of every atom's checkpoint.
    Two queries for the whole page, both on indexed columns.
    """
    from fleetflow.persistence.db import READ_ONLY
    from fleetflow.persistence.logbook.backend import LogbookBackend
    from fleetflow.persistence.logbook.models import ATOMDETAILS, FLOWDETAILS

    empty = {"updated_at": None, "last_progress_at": None}
    if not flow_ids or not isinstance(backend, LogbookBackend):
        return {flow_id: dict(empty) for flow_id in flow_ids}
    fd, ad = FLOWDETAILS.c, ATOMDETAILS.c
    with backend.engine.execution_options(**{READ_ONLY: True}).connect() as conn:
        flows = dict(conn.execute(sa.select(fd.uuid, fd.updated_at)
                                  .where(fd.uuid.in_(flow_ids))).all())
        atoms = dict(conn.execute(sa.select(ad.parent_uuid, sa.func.max(ad.updated_at))
                                  .where(ad.parent_uuid.in_(flow_ids))
                                  .group_by(ad.parent_uuid)).all())
    found = {}
    for flow_id in flow_ids:
        stamps = [t for t in (flows.get(flow_id), atoms.get(flow_id)) if t is not None]
        found[flow_id] = {"updated_at": _iso(flows.get(flow_id)),
                          "last_progress_at": _iso(max(stamps)) if stamps else None}
    return found
