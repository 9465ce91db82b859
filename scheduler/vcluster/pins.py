"""Pinned members of a virtual cluster: the existing ones an update keeps where they are.

An update places its new members jointly with the members that exist, given
as ``pinned_hosts`` (server -> its host) and ``pinned_backends`` (volume ->
its backend). A pinned member takes part in every grouping but is "placed"
only where it is:

* its host set (backend set) is fixed on its host (backend): the new
  members sharing it by affinity go there, or nowhere;
* its rack and zone bind the new host sets of its affinity unit, and a new
  server linked to a pinned volume must reach that volume's backend: both
  are static filters of the new host sets (``rack of pinned a: ...``);
* it counts against every anti-affinity limit before the first unit.

Its resources are already in the snapshot's usage and the backends'
``used_gb``: only new members consume room. Its host is not filtered by
state (a pinned server on a down host still holds its domains), but a new
member never goes to a down host. Pinned members that already break a
grouping between themselves leave nothing to place: the pass does not fit
and the explanation names the grouping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import capabilities as caps
from fleetflow.scheduler.moves.explain import domain_text
from fleetflow.scheduler.moves.place import canonical
from fleetflow.scheduler.snapshot import HostState
from fleetflow.scheduler.spec import AFFINITY
from fleetflow.scheduler.vcluster.explain import Step, resources_label
from fleetflow.scheduler.vcluster.pool import Pool, types_ok
from fleetflow.scheduler.vcluster.rules import Rules

if TYPE_CHECKING:
    from fleetflow.scheduler.vcluster.passes import Placer


def _bad(message: str) -> InvalidInput:
    return InvalidInput(message, field="instances")


class Pins:
    """Pinned members resolved to host positions and backend indices, and what they force."""

    def __init__(self, rules: Rules, hosts: Sequence[HostState], pool: Pool,
                 pinned_hosts: Mapping[str, str] | None,
                 pinned_backends: Mapping[str, str] | None):
        self.rules, self.hosts, self.pool = rules, hosts, pool
        self.position = {h.name: p for p, h in enumerate(hosts)}
        by_backend = {b.name: i for i, b in enumerate(pool.backends)}
        self.server_at: dict[str, int] = {}  # pinned server -> host position
        for name, host_name in sorted((pinned_hosts or {}).items()):
            if name not in rules.servers:
                raise _bad(f"pinned_hosts: {name!r} is not a server of the cluster")
            if host_name not in self.position:
                raise _bad(f"pinned_hosts: server {name}: no host {host_name!r}")
            self.server_at[name] = self.position[host_name]
        self.volume_at: dict[str, int] = {}  # pinned volume -> backend index
        for name, backend_name in sorted((pinned_backends or {}).items()):
            if name not in rules.volumes:
                raise _bad(f"pinned_backends: {name!r} is not a volume of the cluster")
            if backend_name not in by_backend:
                raise _bad(f"pinned_backends: volume {name}: no backend {backend_name!r}")
            self.volume_at[name] = by_backend[backend_name]
        self.fresh_servers = {root: [s for s in members if s not in self.server_at]
                              for root, members in rules.host_sets.items()}
        self.fresh_volumes = {root: [v for v in members if v not in self.volume_at]
                              for root, members in rules.backend_sets.items()}
        self.host_set_at: dict[str, int] = {}  # host set root -> the host of its pinned
        self.backend_set_at: dict[str, int] = {}
        self.rack_force: dict[str, tuple[Any, str]] = {}  # rack_of root -> (rack, pinned)
        self.zone_force: dict[str, tuple[Any, str]] = {}
        self.reach_force: dict[str, list[tuple[int, str]]] = {}  # host set -> (backend, pinned)

    # -- what pinned members force ---------------------------------------------------------

    def pinned_in_host_set(self, root: str) -> str:
        return next(s for s in self.rules.host_sets[root] if s in self.server_at)

    def pinned_in_backend_set(self, root: str) -> str:
        return next(v for v in self.rules.backend_sets[root] if v in self.volume_at)

    def reach_rack(self, index: int) -> Any:
        """The rack whose hosts reach backend ``index`` (a host-local one: its host's)."""
        backend = self.pool.backends[index]
        if backend.scope == "host" and backend.host_name in self.position:
            return self.hosts[self.position[backend.host_name]].domain("rack")
        return backend.domain("rack")

    def force(self, root: str) -> tuple:
        """Static filters pinned members put on new host set ``root``, as a signature."""
        rules = self.rules
        found: list[tuple[str, Any, str]] = []
        rack = self.rack_force.get(rules.rack_of.find(root))
        zone = self.zone_force.get(rules.zone_of.find(root))
        if rack is not None:
            found.append(("rack", *rack))
        elif zone is not None:
            found.append(("zone", *zone))
        found += [("reach", index, volume) for index, volume in self.reach_force.get(root, ())]
        return tuple(found)

    # -- pinned members against each other ---------------------------------------------------

    def check(self) -> str | None:
        """Fix pinned sets and seed the anti-affinity counts; why pinned members clash."""
        return (self._sets() or self._links() or self._domains() or self._seed_servers()
                or self._seed_volumes())

    def _sets(self) -> str | None:
        rules = self.rules
        for kind, sets, at, fixed in (("host", rules.host_sets, self.server_at, self.host_set_at),
                                      ("backend", rules.backend_sets, self.volume_at,
                                       self.backend_set_at)):
            for root in sorted(sets):
                pinned = [m for m in sets[root] if m in at]
                for other in pinned[1:]:
                    if at[other] != at[pinned[0]]:
                        return self._apart(pinned[0], other, kind)
                if pinned:
                    fixed[root] = at[pinned[0]]
        return None

    def _links(self) -> str | None:
        rules = self.rules
        for backend_set in sorted(self.backend_set_at):
            index = self.backend_set_at[backend_set]
            volume = self.pinned_in_backend_set(backend_set)
            for host_set in rules.links[backend_set]:
                position = self.host_set_at.get(host_set)
                if position is None:
                    self.reach_force.setdefault(host_set, []).append((index, volume))
                elif index not in self.pool.reach(self.hosts[position]):
                    server = self.pinned_in_host_set(host_set)
                    return (f"{self._tie(server, volume)}: pinned {volume} on "
                            f"{self.pool.backends[index].name} is out of reach of pinned "
                            f"{server} on {self.hosts[position].name}")
        return None

    def _domains(self) -> str | None:
        rules = self.rules
        placed = [(s, self.hosts[p].domain("rack")) for s, p in self.server_at.items()]
        placed += [(v, self.reach_rack(i)) for v, i in self.volume_at.items()]
        for name, rack in sorted(placed):
            for scope, uf, force, domain in (("rack", rules.rack_of, self.rack_force, rack),
                                             ("zone", rules.zone_of, self.zone_force, rack[:2])):
                held = force.setdefault(uf.find(name), (domain, name))
                if held[0] != domain:
                    return self._apart(held[1], name, scope)
        return None

    def _apart(self, first: str, second: str, scope: str) -> str:
        return (f"{self._tie(first, second, scope)}: pinned "
                f"{first} ({self._where(first, scope)}) and {second} "
                f"({self._where(second, scope)}) are in different {scope}s")

    def _where(self, member: str, scope: str) -> str:
        if member in self.server_at:
            host = self.hosts[self.server_at[member]]
            return domain_text(host.domain(scope) if scope != "backend" else host.name)
        index = self.volume_at[member]
        if scope in ("rack", "zone"):
            rack = self.reach_rack(index)
            return domain_text(rack if scope == "rack" else rack[:2])
        return self.pool.backends[index].name

    def _tie(self, first: str, second: str, scope: str | None = None) -> str:
        """The affinity tying two members (one holding both, else either), or attachment."""
        either = None
        for grouping in self.rules.groupings:
            if grouping.rule != AFFINITY:
                continue
            if first in grouping.members and second in grouping.members:
                either = grouping.name
                break
            if either is None and (first in grouping.members or second in grouping.members):
                either = grouping.name
        what = "attachment" if either is None else f"grouping {either} (affinity"
        if scope:
            return f"{what} ({scope})" if either is None else f"{what}, {scope})"
        return what if either is None else f"{what})"

    def _seed_servers(self) -> str | None:
        self.first: dict[tuple, str] = {}
        for name in sorted(self.server_at):
            host = self.hosts[self.server_at[name]]
            for rule in self.rules.anti_of.get(name, ()):
                if rule.ss is not None:
                    domain = host.domain(rule.ss)
                    clash = self.first.setdefault((id(rule), "ss", domain), name)
                    if clash != name:
                        return _anti(rule.name, rule.ss, clash, name, domain)
                    rule.server_counts[domain] += 1
                if rule.sv is not None:
                    domain = host.domain(rule.sv)
                    self.first.setdefault((id(rule), "sn", domain), name)
                    rule.server_near[domain] += 1
        return None

    def _seed_volumes(self) -> str | None:
        for name in sorted(self.volume_at):
            backend = self.pool.backends[self.volume_at[name]]
            for rule in self.rules.anti_of.get(name, ()):
                if rule.vv is not None:
                    domain = backend.domain(rule.vv)
                    clash = self.first.setdefault((id(rule), "vv", domain), name)
                    if clash != name:
                        return _anti(rule.name, rule.vv, clash, name, domain)
                    rule.volume_counts[domain] += 1
                if rule.sv is not None and backend.domain(rule.sv) is not None:
                    domain = backend.domain(rule.sv)
                    clash = self.first.get((id(rule), "sn", domain))
                    if clash is not None:
                        return _anti(rule.name, rule.sv, clash, name, domain)
                    rule.volume_near[domain] += 1
        return None

    # -- new members sharing a pinned host or backend ------------------------------------

    def host_set_reason(self, placer: Placer, root: str, reach: Sequence[tuple[str, ...]],
                        matchers: dict[str, Any]) -> str | None:
        """Why pinned host set ``root`` can never take its new servers or reach its volumes."""
        fresh = placer.fresh_servers[root]
        position = self.host_set_at[root]
        host = self.hosts[position]
        subject = f"host {host.name} of pinned {self.pinned_in_host_set(root)}"
        if fresh:
            subject = f"{_subject('server', fresh)}: {subject}"
        if fresh and not host.takes_new_servers:
            why = f"held by {host.held_by}" if host.held_by else f"state {host.state}"
            return f"{subject}: {Step(why, 1, 0, 'host')}"
        for name in fresh:
            wanted = self.rules.servers[name].capabilities
            if wanted:
                key = canonical(wanted)
                if key not in matchers:
                    matchers[key] = caps.host_matcher(caps.parse_requirements(wanted))
                if not matchers[key](host.capabilities):
                    return f"{subject}: {Step(f'capabilities of {name}', 1, 0, 'host')}"
        for types in reach:
            wanted_types = frozenset(types)
            if not any(types_ok(self.pool.backends[i], wanted_types)
                       for i in self.pool.reach(host)):
                label = ("reaches a backend" if not types
                         else f"reaches volume_type {'+'.join(types)}")
                return f"{subject}: {Step(label, 1, 0, 'host')}"
        if fresh and not placer.run.fits(position, placer.total[root]):
            label = resources_label(placer.run.short_of([position], placer.total[root]))
            return f"{subject}: {Step(label, 1, 0, 'host')}"
        return None

    def backend_set_reason(self, placer: Placer, root: str) -> str | None:
        """Why the new volumes of pinned backend set ``root`` can never join it, or None."""
        fresh = placer.fresh_volumes[root]
        if not fresh:
            return None
        index = self.backend_set_at[root]
        backend = self.pool.backends[index]
        subject = (f"{_subject('volume', fresh)}: backend {backend.name} of pinned "
                   f"{self.pinned_in_backend_set(root)}")
        types = placer.types[root]
        if not types_ok(backend, types):
            label = f"volume_type {'+'.join(sorted(types))}"
            return f"{subject}: {Step(label, 1, 0, 'backend')}"
        if self.pool.free(index) < placer.gb[root]:
            return f"{subject}: {Step('capacity', 1, 0, 'backend')}"
        return None


def _anti(grouping: str, scope: str, first: str, second: str, domain: Any) -> str:
    return (f"grouping {grouping} (anti-affinity, {scope}): pinned {first} and {second} "
            f"share {scope} {domain_text(domain)}")


def _subject(kind: str, members: Sequence[str]) -> str:
    return f"{kind} {members[0]}" if len(members) == 1 else f"{kind}s {', '.join(members)}"
