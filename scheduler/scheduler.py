"""Place N instances in one pass over one view of the cloud.

Why one pass: docs/origins.md, "Reservations of N instances".

How the pass stays fast (1,000 instances on 10,000 hosts well under 1 s):

1. Static filters run once over the fleet (``filters.run_filters``), then the
   group rule's filter (members already placed), then for affinity the one
   domain everybody goes to is chosen up front.
2. The survivors go into a two-level heap: one heap of hosts per failure
   domain of the group's scope (each host its own domain without a group),
   and a heap of domains keyed by (soft policy score, best host key). Placing
   an instance changes only the chosen host and its domain, so each
   placement is two heap operations: O(N log H) for the pass.
3. Usage and member counts only grow during a pass, so a host that no longer
   fits, or a domain that reached ``max_per_host``, is dropped for good.

Usage is recorded in a private overlay: the snapshot given is not changed
(call ``CloudSnapshot.add_usage`` once the placement is claimed, if the same
snapshot serves another request).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence

from fleetflow.scheduler.filters import FilterStep, run_filters
from fleetflow.scheduler.policies import GroupRule
from fleetflow.scheduler.result import InstancePlacement, NoValidHost, Placement
from fleetflow.scheduler.snapshot import CloudSnapshot, HostState
from fleetflow.scheduler.spec import RequestSpec
from fleetflow.scheduler.weighers import SPREAD, host_key_function


def schedule(spec: RequestSpec, snapshot: CloudSnapshot, alternates: int = 2,
             weigher: str = SPREAD) -> Placement:
    """Place up to ``spec.max_count`` instances; raise NoValidHost below ``min_count``.

    Each placed instance gets a primary host and up to ``alternates`` other
    hosts that also fit (given every primary) and keep the group rule if the
    instance moved there instead of its primary.
    """
    run = _Pass(spec, snapshot, weigher)
    hosts, steps = run_filters(spec, snapshot.hosts, backend_free=snapshot.backend_free)
    hosts, group_steps = run.rule.filter(hosts)
    steps += group_steps
    if run.rule.affinity:
        positions = {h.name: i for i, h in enumerate(hosts)}
        hosts, step = run.rule.choose_affinity_domain(
            hosts, fit_count=lambda h: h.fit_count(spec.resources),
            rank=lambda h: run.key(h, h.used, positions[h.name]),
            min_count=spec.min_count, max_count=spec.max_count)
        steps.append(step)
        if not hosts:
            raise NoValidHost(steps, placed=0, min_count=spec.min_count, index=0)
    primaries = run.place(hosts, spec.max_count)
    if len(primaries) < spec.min_count:
        raise NoValidHost(run.explain_next(), placed=len(primaries),
                          min_count=spec.min_count, index=len(primaries))
    alternates_of = run.alternates(hosts, primaries, alternates)
    instances = [InstancePlacement(instance=spec.instance_key(i), index=i, host=host.name,
                                   alternates=[a.name for a in alternates_of[i]])
                 for i, host in enumerate(primaries)]
    named = {h.name for h in primaries} | {a.name for alts in alternates_of for a in alts}
    return Placement(instances=instances,
                     unplaced=[spec.instance_key(i)
                               for i in range(len(primaries), spec.max_count)],
                     host_uuids={name: snapshot.by_name[name].uuid for name in sorted(named)},
                     filters=steps)


class _Pass:
    """State of one scheduling pass: usage overlay, group counts, weigher."""

    def __init__(self, spec: RequestSpec, snapshot: CloudSnapshot, weigher: str):
        self.spec = spec
        self.snapshot = snapshot
        self.rule = GroupRule(spec.group, snapshot)
        self.key = host_key_function(weigher, spec.resources)
        self.wanted = tuple(spec.resources.items())
        # host name -> used, copied on first write so the snapshot stays untouched
        self.usage: dict[str, dict[str, int]] = {}
        self.placed_on: Counter = Counter()  # host name -> instances placed this pass
        self.start_keys: list = []  # host key per position at the start of the pass
        # Data volumes: backends are shared by a rack's hosts, so placing on one
        # host can leave its neighbours without room; free GB by backend uuid.
        self.volume_gb = spec.volume_gb or 0
        self.backend_free: dict[str, int] = (dict(snapshot.backend_free) if self.volume_gb
                                             else {})

    def used(self, host: HostState) -> Mapping[str, int]:
        return self.usage.get(host.name, host.used)

    def fits(self, host: HostState) -> bool:
        used = self.usage.get(host.name, host.used)
        capacity = host.capacity
        for rc, amount in self.wanted:
            if capacity.get(rc, 0) - used.get(rc, 0) < amount:
                return False
        return not self.volume_gb or self._volume_backend(host) is not None

    def _volume_backend(self, host: HostState) -> str | None:
        """The reachable backend with the most free space that holds a volume (as the
        volume task picks it), or None."""
        best, best_free = None, self.volume_gb - 1
        for uuid in host.backends:
            free = self.backend_free.get(uuid, 0)
            if free > best_free:
                best, best_free = uuid, free
        return best

    def consume(self, host: HostState) -> None:
        self.placed_on[host.name] += 1
        used = self.usage.get(host.name)
        if used is None:
            used = self.usage[host.name] = dict(host.used)
        for rc, amount in self.wanted:
            used[rc] = used.get(rc, 0) + amount
        if self.volume_gb:
            backend = self._volume_backend(host)
            if backend is not None:
                self.backend_free[backend] -= self.volume_gb

    def place(self, hosts: Sequence[HostState], count: int) -> list[HostState]:
        """Greedy placement of up to ``count`` instances; returns their hosts in order."""
        # Keys at the start of the pass; alternates reuse those of untouched hosts.
        # A host key ends with the host's position, so it identifies the host.
        self.start_keys = [self.key(host, host.used, position)
                           for position, host in enumerate(hosts)]
        if self.rule.scope == "host":
            return self._place_by_host(hosts, count)
        return self._place_by_domain(hosts, count)

    def _place_by_host(self, hosts: Sequence[HostState], count: int) -> list[HostState]:
        """Every host is its own domain: one heap of (soft score, host key)."""
        rule = self.rule
        top = [(rule.soft_score(host.name), key)
               for host, key in zip(hosts, self.start_keys, strict=True)]
        heapq.heapify(top)
        placed: list[HostState] = []
        while len(placed) < count and top:
            position = top[0][1][-1]
            host = hosts[position]
            if self.volume_gb and not self.fits(host):
                heapq.heappop(top)  # a neighbour took its storage: never again this pass
                continue
            self.consume(host)
            rule.record(host)
            placed.append(host)
            if self.fits(host) and rule.allows(host):
                heapq.heapreplace(top, (rule.soft_score(host.name),
                                        self.key(host, self.usage[host.name], position,
                                                 self.placed_on[host.name])))
            else:
                heapq.heappop(top)  # full, or at max_per_host: never again this pass
        return placed

    def _place_by_domain(self, hosts: Sequence[HostState], count: int) -> list[HostState]:
        """A heap of hosts per rack/zone, and a heap of domains by (soft score, best host)."""
        rule = self.rule
        domains: list = []
        heaps: list[list] = []
        index_of: dict = {}
        for host, key in zip(hosts, self.start_keys, strict=True):
            domain = host.domain(rule.scope)
            slot = index_of.get(domain)
            if slot is None:
                slot = index_of[domain] = len(domains)
                domains.append(domain)
                heaps.append([])
            heaps[slot].append(key)
        top = []
        for slot, heap in enumerate(heaps):
            heapq.heapify(heap)
            top.append((rule.soft_score(domains[slot]), heap[0], slot))
        heapq.heapify(top)

        placed: list[HostState] = []
        while len(placed) < count and top:
            _, best, slot = heapq.heappop(top)
            heap, position = heaps[slot], best[-1]
            host = hosts[position]
            if self.volume_gb and not self.fits(host):
                heapq.heappop(heap)  # a neighbour took its storage: never again this pass
                if heap:
                    heapq.heappush(top, (rule.soft_score(domains[slot]), heap[0], slot))
                continue
            self.consume(host)
            rule.record(host)
            placed.append(host)
            if self.fits(host):
                heapq.heapreplace(heap, self.key(host, self.usage[host.name], position,
                                                 self.placed_on[host.name]))
            else:
                heapq.heappop(heap)  # full for this request: never fits again this pass
            # Only this domain changed; a domain at its limit never reopens.
            if heap and rule.allows(host):
                heapq.heappush(top, (rule.soft_score(domains[slot]), heap[0], slot))
        return placed

    def explain_next(self) -> list[FilterStep]:
        """The filter chain as it stands for the next instance, with this pass's usage."""
        hosts, steps = run_filters(self.spec, self.snapshot.hosts, usage=self.usage,
                                   backend_free=self.backend_free or None)
        _, group_steps = self.rule.filter(hosts)
        return steps + group_steps

    def alternates(self, hosts: Sequence[HostState], primaries: Sequence[HostState],
                   per_instance: int) -> list[list[HostState]]:
        """Up to ``per_instance`` alternates for each primary, best first.

        Candidates are ranked once; instances take them in rotation so the
        alternates of 1,000 instances do not all name the same two hosts.
        """
        if per_instance <= 0 or not primaries:
            return [[] for _ in primaries]
        rule = self.rule

        def rank(position: int, host: HostState):
            # Hosts this pass did not touch keep their start key (and still fit).
            key = self.start_keys[position]
            if host.name in self.placed_on:
                key = self.key(host, self.usage[host.name], position, self.placed_on[host.name])
            return (rule.soft_score(host.domain(rule.scope)), key)

        fitting = [(rank(p, h), h) for p, h in enumerate(hosts)
                   if (h.name not in self.placed_on and not self.volume_gb) or self.fits(h)]
        fitting.sort(key=lambda item: item[0])
        # Open to anybody: domains below the anti-affinity limit.
        shared = [h for _, h in fitting if rule.allows(h)]
        # Hosts in a full domain suit only instances whose primary is in it
        # (moving inside the domain keeps its count), e.g. same rack.
        closed: dict = {}
        order = {id(h): i for i, (_, h) in enumerate(fitting)}  # rank of each candidate
        if rule.limit is not None and rule.scope != "host":
            for _, host in fitting:
                if not rule.allows(host):
                    closed.setdefault(host.domain(rule.scope), []).append(host)

        result, cursor = [], 0
        for primary in primaries:
            picks: list[HostState] = []
            scanned = 0
            while len(picks) < per_instance and scanned < len(shared):
                host = shared[(cursor + scanned) % len(shared)]
                scanned += 1
                if host is not primary and rule.alternate_ok(host, primary):
                    picks.append(host)
            cursor = (cursor + scanned) % len(shared) if shared else 0
            extra = [h for h in closed.get(primary.domain(rule.scope), ())
                     if h is not primary and rule.alternate_ok(h, primary)]
            if extra:
                picks = sorted(picks + extra[:per_instance], key=lambda h: order[id(h)])
                picks = picks[:per_instance]
            result.append(picks)
        return result
