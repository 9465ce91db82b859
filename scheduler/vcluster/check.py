"""Does a grouping hold where its members are now? (the API's view, the audit)

Pure: it takes where each member is and the topology of those places, the
same rules as the placer (the table in scheduler/vcluster/place.py), pair by pair.
A member with no place yet (not built, or gone) makes a grouping not hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from fleetflow.scheduler.vcluster.rules import AFFINITY, pair_scopes


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a member is: a host (servers) or a backend (volumes), with its topology.

    ``host``: a server's host, or a host-local backend's host (None for a
    rack-shared backend).
    """

    name: str
    host: str | None
    region: str = ""
    zone: str = ""
    rack: str = ""

    def domain(self, scope: str):
        if scope == "rack":
            return f"{self.region}/{self.zone}/{self.rack}"
        if scope == "zone":
            return f"{self.region}/{self.zone}"
        if scope == "host":
            return self.host
        return self.name  # backend

    def reaches(self, backend: Place) -> bool:
        """A server here reaches ``backend``: its own disk, or its rack's shared one."""
        if backend.host is not None:
            return backend.host == self.name
        return (self.region, self.zone, self.rack) == (backend.region, backend.zone,
                                                       backend.rack)


def _all_differ(places: Sequence[Place], scope: str) -> bool:
    seen = set()
    for place in places:
        domain = place.domain(scope)
        if domain is not None and domain in seen:
            return False
        seen.add(domain)
    return True


def holds(rule: str, scope: str | None, members: Sequence[str],
          servers: Mapping[str, Place | None], volumes: Mapping[str, Place | None]
          ) -> tuple[bool, dict[str, str | None]]:
    """``(satisfied, {member: its domain})`` of one grouping.

    ``servers`` / ``volumes``: every member of the cluster of that kind, with
    its place (None: not placed).
    """
    from fleetflow.scheduler.vcluster.place import Grouping

    s_names = [m for m in members if m in servers]
    v_names = [m for m in members if m in volumes]
    ss, vv, sv = pair_scopes(Grouping("", list(members), rule, scope), s_names, v_names)
    shown_scope = scope or ss or vv or sv or ("host" if s_names else "backend")
    places = {m: servers.get(m) if m in servers else volumes.get(m) for m in members}
    domains = {m: (p.domain(shown_scope if m in servers or shown_scope != "host" else "backend")
                   if p is not None else None) for m, p in places.items()}
    if any(p is None for p in places.values()):
        return False, domains
    s_places = [places[m] for m in s_names]
    v_places = [places[m] for m in v_names]
    if rule == AFFINITY:
        ok = True
        if ss is not None:
            ok = len({p.domain(ss) for p in s_places}) == 1
        if vv is not None:
            ok = ok and len({p.name for p in v_places}) == 1
        # Server-volume affinity: every server reaches every volume of the grouping.
        ok = ok and all(s.reaches(v) for s in s_places for v in v_places)
        return ok, domains
    ok = True
    if ss is not None:
        ok = _all_differ(s_places, ss)
    if vv is not None:
        ok = ok and _all_differ(v_places, vv)
    if sv is not None:
        ok = ok and all(_server_domain(s, sv) != v.domain(sv) for s in s_places
                        for v in v_places)
    return ok, domains


def _server_domain(server: Place, scope: str):
    return server.name if scope == "host" else server.domain(scope)
