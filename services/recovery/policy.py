"""What a recovery moves, in which order, and where to: ``[recovery]`` and server metadata.

- which: every server of the dead hosts (``servers = all``) or only those
  with metadata ``ha=true`` (``servers = ha``), unless an administrator set
  the project's own choice (all, ha or none: persistence.recoveries'
  ``recovery_projects``); a server with ``recovery=never`` (an appliance
  someone else manages) is never moved, and ``ha=false`` excludes one
  server under ``all``.
- order: ``recovery_priority`` (an integer, higher first), then by server
  group, so a group's members are placed and moved together, then by age.
- where: ``any`` host; ``reserve``: the hosts of the reserve pool first
  (brought ``up`` on demand), any host when they are not enough; ``zone``:
  the hosts of the dead hosts' zone only.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.common import states
from fleetflow.persistence import recoveries as rows
from fleetflow.persistence.models import Host, Instance

HA = "ha"
RECOVERY = "recovery"
PRIORITY = "recovery_priority"
NEVER = "never"
NONE = "none"
RESERVE_CAPABILITY = "reserve_pool"
# Out of service until a recovery needs them.
RESERVE_IDLE = (states.HOST_MAINTENANCE, states.HOST_DISABLED)


def _truthy(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def excluded_why(conf, metadata: dict | None, project: str | None = None) -> str | None:
    """Why a server with ``metadata`` stays where it is, or None when it moves.

    ``project``: its project's override of ``[recovery] servers``, if any.
    """
    metadata = metadata or {}
    if str(metadata.get(RECOVERY, "")).strip().lower() == NEVER:
        return "recovery=never"
    if project == NONE:
        return "its project's recovery is none"
    if HA in metadata and not _truthy(metadata[HA]):
        return "ha=false"
    if (project or conf.recovery.servers) == HA and not _truthy(metadata.get(HA)):
        where = "its project's recovery is ha" if project else "[recovery] servers = ha"
        return f"not ha=true ({where})"
    return None


def _priority(metadata: dict | None) -> int:
    try:
        return int((metadata or {}).get(PRIORITY, 0))
    except (TypeError, ValueError):
        return 0


def servers(session: orm.Session, conf, hosts: list[str]) -> tuple[list[str], dict[str, str]]:
    """``(ids to move in order, {id: why it stays})`` of the servers on ``hosts``."""
    found = list(session.scalars(sa.select(Instance).where(
        Instance.host.in_(hosts), Instance.status.in_((states.ACTIVE, states.ERROR)))))
    overrides = rows.project_overrides(session, (s.tenant_id for s in found))
    moving, staying = [], {}
    for server in found:
        why = excluded_why(conf, server.metadata_, overrides.get(server.tenant_id))
        if why:
            staying[server.id] = why
        else:
            moving.append(server)
    moving.sort(key=lambda s: (-_priority(s.metadata_), s.group_id or "~", s.created_at,
                               s.id))
    return [s.id for s in moving], staying


def reserve_hosts(session: orm.Session, conf) -> list[Host]:
    """The reserve pool's hosts that could take servers once brought up."""
    pool = conf.recovery.reserve_pool
    return [h for h in session.scalars(sa.select(Host).where(
        Host.evacuation_id.is_(None), Host.state.in_((states.HOST_UP, *RESERVE_IDLE)))
        .order_by(Host.name)) if (h.capabilities or {}).get(RESERVE_CAPABILITY) == pool]


def zone_hosts(session: orm.Session, zone: str | None, dead: list[str]) -> list[str]:
    return list(session.scalars(sa.select(Host.name).where(
        Host.zone == zone, Host.state == states.HOST_UP, Host.name.not_in(dead),
        Host.evacuation_id.is_(None)).order_by(Host.name)))
