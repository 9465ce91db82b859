"""Server group policies as one stateful :class:`GroupRule` per scheduling pass.

- ``affinity``: every member in one failure domain of the group's scope; with
  existing members, in theirs. ``network-proximity`` is the same at rack
  scope; with both, the finer domain is chosen (it lies inside the coarser).
- ``anti-affinity``: at most ``max_per_host`` (default 1) members per failure
  domain of the scope, existing members included.
- ``soft-affinity`` / ``soft-anti-affinity``: no filter; the scheduler
  prefers domains with more / fewer members (see weighers).
- ``host-capabilities``: the group's capability requirements bind every
  member (applied as a filter in ``filters.py``).

The rule keeps member counts per domain, and the scheduler tells it about
each instance it places, so instance k sees instances 0..k-1.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fleetflow.scheduler.filters import FilterStep
from fleetflow.scheduler.snapshot import CloudSnapshot, HostState
from fleetflow.scheduler.spec import (
    AFFINITY,
    ANTI_AFFINITY,
    NETWORK_PROXIMITY,
    SCOPES,
    SOFT_AFFINITY,
    SOFT_ANTI_AFFINITY,
    GroupSpec,
)

_FINENESS = {scope: i for i, scope in enumerate(SCOPES)}  # host finest, zone coarsest


class GroupRule:
    """The group's constraints and its member counts during one pass."""

    def __init__(self, group: GroupSpec | None, snapshot: CloudSnapshot):
        policy = group.placement_policy if group else None
        scope = group.scope if group else "host"
        # Hard affinity constraints as (name, scope); the explanation names each.
        self.affinity: list[tuple[str, str]] = []
        if policy == AFFINITY:
            self.affinity.append((AFFINITY, scope))
        if group and NETWORK_PROXIMITY in group.policies:
            self.affinity.append((NETWORK_PROXIMITY, "rack"))
        # Scope of the policy that counts members per domain (anti or soft).
        counted = policy in (ANTI_AFFINITY, SOFT_AFFINITY, SOFT_ANTI_AFFINITY)
        self.scope = scope if counted else "host"
        self.limit: int | None = None
        if policy == ANTI_AFFINITY:
            self.limit = int(group.max_per_host or 1)
        # -1: more members is better (soft-affinity); +1: fewer is better.
        self.soft = {SOFT_AFFINITY: -1, SOFT_ANTI_AFFINITY: 1}.get(policy, 0)
        self.counts: Counter = Counter()
        self.member_domains: dict[str, set] = {name: set() for name, _ in self.affinity}
        for host_name in (group.member_hosts if group else ()):
            host = snapshot.by_name.get(host_name)
            if host is None:
                # A host the snapshot no longer has (deleted) is in no rack or zone
                # we know of: its member counts only at host scope (where, as in
                # Nova, host affinity with it then finds no valid host).
                if self.scope == "host":
                    self.counts[host_name] += 1
                for name, aff_scope in self.affinity:
                    if aff_scope == "host":
                        self.member_domains[name].add(host_name)
                continue
            self.counts[host.domain(self.scope)] += 1
            for name, aff_scope in self.affinity:
                self.member_domains[name].add(host.domain(aff_scope))
        self.chosen: dict[str, Any] = {}  # affinity constraint name -> chosen domain

    # -- filtering -------------------------------------------------------------------

    def _allowed(self, name: str) -> set | None:
        if name in self.chosen:
            return {self.chosen[name]}
        return self.member_domains[name] or None

    def filter(self, hosts: Sequence[HostState]) -> tuple[list[HostState], list[FilterStep]]:
        """Drop hosts the group rule forbids given the members placed so far."""
        steps = []
        survivors = list(hosts)
        for name, scope in self.affinity:
            allowed = self._allowed(name)
            if allowed is not None:
                before = len(survivors)
                survivors = [h for h in survivors if h.domain(scope) in allowed]
                steps.append(FilterStep(name, before, len(survivors)))
        if self.limit is not None:
            before = len(survivors)
            survivors = [h for h in survivors if self.counts[h.domain(self.scope)] < self.limit]
            steps.append(FilterStep(ANTI_AFFINITY, before, len(survivors)))
        return survivors, steps

    def allows(self, host: HostState) -> bool:
        """May one more member go to ``host`` (after ``filter`` was applied)?"""
        return self.limit is None or self.counts[host.domain(self.scope)] < self.limit

    def record(self, host: HostState) -> None:
        """One more member was placed on ``host``."""
        self.counts[host.domain(self.scope)] += 1

    def soft_score(self, domain: Any) -> int:
        """Lower is better: the soft policies' preference for a domain."""
        return self.soft * self.counts[domain]

    def alternate_ok(self, alternate: HostState, primary: HostState) -> bool:
        """Would moving one member from ``primary`` to ``alternate`` keep the rule?"""
        for _, scope in self.affinity:
            if alternate.domain(scope) != primary.domain(scope):
                return False
        if self.limit is not None:
            domain = alternate.domain(self.scope)
            others = self.counts[domain] - (domain == primary.domain(self.scope))
            if others >= self.limit:
                return False
        return True

    # -- choosing the affinity domain ----------------------------------------------

    def choose_affinity_domain(self, hosts: Sequence[HostState],
                               fit_count: Callable[[HostState], int],
                               rank: Callable[[HostState], Any], min_count: int,
                               max_count: int) -> tuple[list[HostState], FilterStep | None]:
        """Pick the one domain all new members go to; return its hosts.

        The domain must hold ``max_count`` if any can (the best ranked such
        one), else the one holding the most; below ``min_count`` nothing is
        chosen and the step says how much the best domain could hold.
        """
        if not self.affinity:
            return list(hosts), None
        # The finest constraint decides; coarser ones hold since it lies inside them.
        name, scope = min(self.affinity, key=lambda item: _FINENESS[item[1]])
        capacity = self._domain_capacity(hosts, scope, fit_count)
        best_rank = {}
        for host in hosts:
            domain = host.domain(scope)
            key = rank(host)
            if domain not in best_rank or key < best_rank[domain]:
                best_rank[domain] = key
        if not capacity:
            return [], FilterStep(name, len(hosts), 0)
        target = min(max_count, max(capacity.values()))
        domain = min((d for d, cap in capacity.items() if cap >= target),
                     key=lambda d: best_rank[d])
        chosen = [h for h in hosts if h.domain(scope) == domain]
        if capacity[domain] < min_count:
            return [], FilterStep(name, len(hosts), 0,
                                  note=f"no {scope} holds {min_count}; "
                                       f"the largest holds {capacity[domain]}")
        self.chosen[name] = domain
        return chosen, FilterStep(name, len(hosts), len(chosen))

    def _domain_capacity(self, hosts: Iterable[HostState], scope: str,
                         fit_count: Callable[[HostState], int]) -> Mapping[Any, int]:
        """How many new members each domain of ``scope`` can take.

        Per domain, the sum over its anti-affinity sub-domains of the lesser
        of the sub-domain's remaining allowance and what fits on its hosts.
        """
        fits: dict[Any, dict[Any, int]] = defaultdict(lambda: defaultdict(int))
        for host in hosts:
            fits[host.domain(scope)][host.domain(self.scope)] += fit_count(host)
        capacity = {}
        for domain, parts in fits.items():
            total = 0
            for part, room in parts.items():
                if self.limit is not None:
                    room = min(room, max(0, self.limit - self.counts[part]))
                total += room
            capacity[domain] = total
        return capacity
