"""Which RPC server serves a compute host: the routes of the compute client.

A host's calls go to the agent that serves it, named in ``hosts.compute_agent``
(a fleet agent serves many hosts under one server name); with no agent named,
the host is its own server (per-host agents).
"""

from __future__ import annotations

import threading

import sqlalchemy as sa

from fleetflow.persistence.models import Host


class HostRoutes:
    """Host name -> RPC server name, from ``hosts.compute_agent`` (cached).

    Without a database every host is its own server (per-host agents). The
    whole table is read once (10,000 rows is one query); a host whose call
    timed out is re-read on its next call, as its agent may have moved.
    """

    def __init__(self, database=None):
        self.database = database
        self._routes: dict[str, str | None] | None = None
        self._lock = threading.Lock()

    def server_for(self, host: str) -> str:
        if self.database is None:
            return host
        with self._lock:
            if self._routes is None:
                with self.database.session() as session:
                    self._routes = dict(session.execute(
                        sa.select(Host.name, Host.compute_agent)).all())
            if host not in self._routes:
                with self.database.session() as session:
                    self._routes[host] = session.execute(
                        sa.select(Host.compute_agent).where(Host.name == host)).scalar()
            return self._routes[host] or host

    def invalidate(self, host: str) -> None:
        """Re-read ``host``'s route on its next call."""
        with self._lock:
            if self._routes is not None:
                self._routes.pop(host, None)

    def refresh(self) -> None:
        """Re-read every route on the next call (an agent restarted elsewhere)."""
        with self._lock:
            self._routes = None
