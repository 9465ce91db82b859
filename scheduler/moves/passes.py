"""The engine under :func:`fleetflow.scheduler.moves.place.place_moves`.

The servers of an evacuation differ (flavors, capabilities, volumes), so the
single heap of ``scheduler.py`` cannot serve them all. Servers with the same
static requirements share an :class:`Eligibility`: the destinations that pass
those requirements and a heap of their host keys. A host's key depends only
on that host's usage (see weighers), so a placement changes one host: a new
entry, with a new version, is pushed into the heaps that hold the host, and
older entries are dropped when they surface. Usage only grows during a pass,
so a host that cannot take the smallest server of an eligibility never can
again and leaves its heap for good.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleetflow.scheduler.filters import FilterStep, short_of
from fleetflow.scheduler.policies import GroupRule
from fleetflow.scheduler.snapshot import CloudSnapshot
from fleetflow.scheduler.weighers import host_key_function

# Alternates are a courtesy for retries: on a huge fleet where few hosts fit a
# server, scanning every candidate for each of 1,000 servers would cost more
# than the whole placement, so the scan per server stops here.
ALTERNATE_SCAN = 256


class Eligibility:
    """Destinations passing one set of static requirements, best host first in ``heap``."""

    def __init__(self, positions: list[int], steps: list[FilterStep]):
        self.positions = positions
        self.members = frozenset(positions)
        self.steps = steps
        # Component-wise minimum of the resources of the servers using it.
        self.smallest: dict[str, int] = {}
        self._admitted = False
        self.heap: list = []
        # Heaps per failure domain, built when an affinity unit first needs them.
        self.domain_heaps: dict[str, dict[Any, list]] = {}
        # Resources that found no host: usage and group counts only grow, so
        # anything at least as large cannot fit later either. Keyed by the
        # group rule that had the last word (None: no host had the room). The
        # same for affinity units led by one of its servers, as (scope, total).
        self.failed: dict[GroupRule | None, list[dict[str, int]]] = {}
        self.failed_units: list[tuple[str, dict[str, int]]] = []
        # (scope, domain) -> resources no host of that domain had room for.
        self.failed_in: dict[tuple[str, Any], list[dict[str, int]]] = {}
        self.ranked: list[int] | None = None
        self.cursor = 0

    def admit(self, resources: Mapping[str, int]) -> None:
        if not self._admitted:
            self._admitted, self.smallest = True, dict(resources)
        else:
            self.smallest = {rc: min(n, resources[rc]) for rc, n in self.smallest.items()
                             if rc in resources}

    def known_to_fail(self, resources: Mapping[str, int], rule: GroupRule | None = None) -> bool:
        """Did resources no larger find no host (for everybody, or in ``rule``'s group)?"""
        return any(covers(resources, failed) for failed in self.failed.get(rule, ()))

    def remember_failure(self, resources: Mapping[str, int], rule: GroupRule | None) -> None:
        self.failed.setdefault(rule, []).append(dict(resources))

    def unit_known_to_fail(self, scope: str, total: Mapping[str, int]) -> bool:
        return any(failed_scope == scope and covers(total, failed)
                   for failed_scope, failed in self.failed_units)


def covers(resources: Mapping[str, int], other: Mapping[str, int]) -> bool:
    """At least ``other`` in every resource class."""
    return all(resources.get(rc, 0) >= n for rc, n in other.items())


class MovePass:
    """Usage overlay, host keys and heaps of one pass; positions index ``snapshot.hosts``."""

    def __init__(self, snapshot: CloudSnapshot, destinations: Sequence[int],
                 classes: Sequence[str], weigher: str):
        self.hosts = snapshot.hosts
        self.destinations = list(destinations)
        self.key = host_key_function(weigher, dict.fromkeys(classes, 1))
        # position -> used, copied on first write so the snapshot stays untouched
        self.usage: dict[int, dict[str, int]] = {}
        self.placed_on: Counter = Counter()
        self.version: dict[int, int] = {}
        self.start_keys = {p: self.key(self.hosts[p], self.hosts[p].used, p)
                           for p in self.destinations}
        # position -> the (heap, smallest resources) pairs that hold it
        self.holders: dict[int, list[tuple[list, dict[str, int]]]] = {}
        self._index: dict[str, dict[Any, list[int]]] = {}
        # scope -> domain -> free resources summed over its hosts, kept current
        self._room: dict[str, dict[Any, dict[str, int]]] = {}
        self._bounds: dict[str, dict[str, int]] = {}

    # -- usage ---------------------------------------------------------------------

    def fits(self, position: int, wanted: Mapping[str, int],
             used: Mapping[str, int] | None = None) -> bool:
        host = self.hosts[position]
        if used is None:
            used = self.usage.get(position, host.used)
        capacity = host.capacity
        for rc, amount in wanted.items():
            if capacity.get(rc, 0) - used.get(rc, 0) < amount:
                return False
        return True

    def short_of(self, positions: Iterable[int], wanted: Mapping[str, int]) -> tuple[str, ...]:
        """Resource classes the hosts at ``positions`` lack room for (see filters.short_of)."""
        return short_of(((self.hosts[p].capacity, self.usage.get(p, self.hosts[p].used))
                         for p in positions), wanted.items())

    def current_key(self, position: int):
        if position in self.placed_on:
            return self.key(self.hosts[position], self.usage[position], position,
                            self.placed_on[position])
        return self.start_keys[position]

    def consume(self, position: int, resources: Mapping[str, int]) -> None:
        host = self.hosts[position]
        used = self.usage.get(position)
        if used is None:
            used = self.usage[position] = dict(host.used)
        for scope, rooms in self._room.items():
            room = rooms[host.domain(scope)]
            for rc, amount in resources.items():
                free = host.capacity.get(rc, 0) - used.get(rc, 0)
                room[rc] = room.get(rc, 0) - (max(free, 0) - max(free - amount, 0))
        for rc, amount in resources.items():
            used[rc] = used.get(rc, 0) + amount
        self.placed_on[position] += 1
        version = self.version[position] = self.version.get(position, 0) + 1
        entry = (self.key(host, used, position, self.placed_on[position]), version)
        for heap, smallest in self.holders.get(position, ()):
            if self.fits(position, smallest, used):
                heapq.heappush(heap, entry)

    # -- heaps and domains -----------------------------------------------------------

    def register(self, eligibility: Eligibility) -> None:
        """Build its heap; call once every server using it was admitted."""
        eligibility.heap = self._heap(eligibility, eligibility.positions)

    def _heap(self, eligibility: Eligibility, positions: Sequence[int]) -> list:
        # Hosts too full for the smallest server are dropped when they surface.
        version, holders = self.version, self.holders
        heap = [(self.current_key(p), version.get(p, 0)) for p in positions]
        heapq.heapify(heap)
        pair = (heap, eligibility.smallest)
        for position in positions:
            found = holders.get(position)
            if found is None:
                holders[position] = [pair]
            else:
                found.append(pair)
        return heap

    def domain_heap(self, eligibility: Eligibility, scope: str, domain: Any) -> list:
        heaps = eligibility.domain_heaps.get(scope)
        if heaps is None:
            by_domain: dict[Any, list[int]] = {}
            for position in eligibility.positions:
                by_domain.setdefault(self.hosts[position].domain(scope), []).append(position)
            heaps = eligibility.domain_heaps[scope] = {
                d: self._heap(eligibility, positions) for d, positions in by_domain.items()}
        return heaps.get(domain, [])

    def pop(self, heap: list, smallest: Mapping[str, int]) -> tuple | None:
        """The best live entry of ``heap``, or None; dead entries are dropped."""
        while heap:
            entry = heapq.heappop(heap)
            position = entry[0][-1]
            if entry[1] != self.version.get(position, 0):
                continue
            if not self.fits(position, smallest):
                continue
            return entry
        return None

    def domain_index(self, scope: str) -> dict[Any, list[int]]:
        """Destinations by failure domain of ``scope``, each list in snapshot order."""
        index = self._index.get(scope)
        if index is None:
            index = self._index[scope] = {}
            for position in self.destinations:
                index.setdefault(self.hosts[position].domain(scope), []).append(position)
        return index

    def rooms(self, scope: str) -> dict[Any, dict[str, int]]:
        rooms = self._room.get(scope)
        if rooms is None:
            rooms = self._room[scope] = {}
            bound = self._bounds[scope] = {}
            for domain, positions in self.domain_index(scope).items():
                room = rooms[domain] = {}
                for position in positions:
                    host = self.hosts[position]
                    used = self.usage.get(position, host.used)
                    for rc, capacity in host.capacity.items():
                        free = capacity - used.get(rc, 0)
                        if free > 0:
                            room[rc] = room.get(rc, 0) + free
                for rc, free in room.items():
                    if free > bound.get(rc, 0):
                        bound[rc] = free
        return rooms

    def bound(self, scope: str) -> dict[str, int]:
        """Per resource class, the most free in one domain of ``scope`` (never grows)."""
        self.rooms(scope)
        return self._bounds[scope]

    def roomy(self, scope: str, domain: Any, total: Mapping[str, int]) -> bool:
        """Do the domain's hosts have ``total`` free, summed (needed, not enough)?"""
        return covers(self.rooms(scope).get(domain, {}), total)

    # -- placing ---------------------------------------------------------------------

    def place_one(self, resources: Mapping[str, int], eligibility: Eligibility,
                  rule: GroupRule | None) -> int | None:
        """The best host for one server, consumed; ``rule`` when its group limits it."""
        if eligibility.known_to_fail(resources) or (
                rule is not None and eligibility.known_to_fail(resources, rule)):
            return None
        aside, found, roomy = [], None, False
        while True:
            entry = self.pop(eligibility.heap, eligibility.smallest)
            if entry is None:
                break
            position = entry[0][-1]
            if self.fits(position, resources):
                roomy = True
                if rule is None or rule.allows(self.hosts[position]):
                    found = position
                    break
            aside.append(entry)
        for entry in aside:
            heapq.heappush(eligibility.heap, entry)
        if found is None:
            eligibility.remember_failure(resources, rule if roomy else None)
            return None
        self.consume(found, resources)
        return found

    # -- alternates ------------------------------------------------------------------

    def alternates(self, primary: int, resources: Mapping[str, int], eligibility: Eligibility,
                   rule: GroupRule | None, count: int) -> list[int]:
        """Up to ``count`` other hosts that fit with every primary placed, best first.

        Servers sharing an eligibility take its ranked hosts in rotation, so
        the alternates of 1,000 servers do not all name the same two hosts.
        """
        if count <= 0:
            return []
        if eligibility.ranked is None:
            eligibility.ranked = [key[-1] for key in sorted(
                self.current_key(p) for p in eligibility.positions)]
        ranked = eligibility.ranked
        picks: list[int] = []
        scanned, start = 0, eligibility.cursor
        limit = min(len(ranked), ALTERNATE_SCAN)
        while len(picks) < count and scanned < limit:
            order = (start + scanned) % len(ranked)
            scanned += 1
            if self.alternate_ok(ranked[order], primary, resources, rule):
                picks.append(order)
        if ranked:
            eligibility.cursor = (start + scanned) % len(ranked)
        return [ranked[order] for order in sorted(picks)]

    def alternate_ok(self, position: int, primary: int, resources: Mapping[str, int],
                      rule: GroupRule | None) -> bool:
        if position == primary or not self.fits(position, resources):
            return False
        return rule is None or rule.alternate_ok(self.hosts[position], self.hosts[primary])
