"""The engine under :func:`fleetflow.scheduler.vcluster.place.place_vcluster`.

Hosts come from the heaps of :class:`MovePass` (one per distinct set of
static requirements, best host first, updated as the pass consumes room).
An affinity unit is tried on the best host for its largest host set (the
*anchor*); its other host sets go to the best host of the rack or zone the
unit forces them into, then its volumes to the best backend every linked
host reaches. Everything is tentative until the whole unit fits; otherwise
the next anchor is tried. Usage and member counts only grow, so the first
unit that fits nowhere ends the pass: the answer is all-or-nothing.

Pinned members (see :mod:`fleetflow.scheduler.vcluster.pins`) are where they are: a unit's
pinned host sets are put first in every trial, its new host sets are
filtered to the rack or zone and backends the pinned ones force, and only
new members (``fresh_servers``, ``fresh_volumes``) consume room or count
in a trial.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from fleetflow.scheduler.moves.passes import Eligibility, MovePass
from fleetflow.scheduler.moves.place import size_measure, sum_resources
from fleetflow.scheduler.snapshot import CloudSnapshot
from fleetflow.scheduler.spec import AFFINITY
from fleetflow.scheduler.vcluster.answer import answer
from fleetflow.scheduler.vcluster.explain import Step, explain_unit
from fleetflow.scheduler.vcluster.pins import Pins
from fleetflow.scheduler.vcluster.place import BackendState, VClusterPlacement
from fleetflow.scheduler.vcluster.pool import Pool, Trial, types_ok
from fleetflow.scheduler.vcluster.rules import AntiRule, Rules
from fleetflow.scheduler.vcluster.static import static_filters

# Anchors (or hosts of a forced domain) a unit tries before it is declared
# not to fit: bounds a failing pass on a large fleet to a few thousand checks.
ANCHOR_TRIES = 2048


class Placer:
    def __init__(self, rules: Rules, snapshot: CloudSnapshot,
                 backends: Sequence[BackendState], weigher: str,
                 pinned_hosts: Mapping[str, str] | None = None,
                 pinned_backends: Mapping[str, str] | None = None):
        self.rules = rules
        self.hosts = snapshot.hosts
        up = [p for p, h in enumerate(self.hosts) if h.takes_new_servers]
        self.host_steps = [Step("state", len(self.hosts), len(up), "host")]
        classes = sorted({rc for s in rules.servers.values() for rc in s.resources})
        self.run = MovePass(snapshot, up, classes, weigher)
        self.pool = Pool(backends, weigher)
        self.pins: Pins | None = None
        # Members a pass places: all, less the pinned ones (already there and counted).
        self.fresh_servers, self.fresh_volumes = rules.host_sets, rules.backend_sets
        self.pinned_idle: frozenset[str] = frozenset()  # pinned host sets with no new server
        if pinned_hosts or pinned_backends:
            self.pins = Pins(rules, self.hosts, self.pool, pinned_hosts, pinned_backends)
            self.fresh_servers = self.pins.fresh_servers
            self.fresh_volumes = self.pins.fresh_volumes
            self.pinned_idle = frozenset(r for r, fresh in self.fresh_servers.items()
                                         if not fresh)
        self.measure = size_measure(self.hosts, up, classes)
        self.total = {root: sum_resources(rules.servers[s].resources for s in members)
                      for root, members in self.fresh_servers.items()}
        self.gb = {root: sum(rules.volumes[v].size_gb for v in members)
                   for root, members in self.fresh_volumes.items()}
        self.types = {root: frozenset(rules.volumes[v].volume_type for v in members
                                      if rules.volumes[v].volume_type is not None)
                      for root, members in self.fresh_volumes.items()}
        capacity_gb = sum(max(b.capacity_gb, 0) for b in self.pool.backends)
        self.gb_share = (lambda gb: gb / capacity_gb if capacity_gb else float(gb > 0))
        self.eligibility: dict[str, Eligibility] = {}
        self.host_of: dict[str, int] = {}
        self.backend_of: dict[str, int] = {}
        self.tries = 0
        self.linked_backends: dict[str, list[int]] = {}  # host set -> backends it reaches
        self.anti_by_id: dict[int, AntiRule] = {id(r): r for r in rules.anti}

    # -- the pass ---------------------------------------------------------------------

    def run_pass(self, alternates: int) -> VClusterPlacement:
        reason = static_filters(self)
        if reason is not None:
            return VClusterPlacement(fits=False, explanation=reason)
        for hsets, bsets in self._ordered_units():
            if not self._place_unit(hsets, bsets):
                return VClusterPlacement(fits=False, explanation=explain_unit(self, hsets, bsets))
        return answer(self, alternates)

    def _ordered_units(self) -> list[tuple[list[str], list[str]]]:
        rules = self.rules
        at_host = self.pins.host_set_at if self.pins is not None else {}
        at_backend = self.pins.backend_set_at if self.pins is not None else {}

        def size(unit: tuple[list[str], list[str]]) -> tuple:
            hsets, bsets = unit
            members = [*(s for r in hsets for s in rules.host_sets[r]),
                       *(v for r in bsets for v in rules.backend_sets[r])]
            share = max(self.measure(sum_resources(self.total[r] for r in hsets)),
                        self.gb_share(sum(self.gb[r] for r in bsets)))
            constraint = len(members) + sum(len(rules.anti_of.get(m, ())) for m in members)
            # Units holding pinned members are bound to their domains: placed first.
            pinned = any(r in at_host for r in hsets) or any(r in at_backend for r in bsets)
            return (not pinned, -share, -constraint, min(members))
        return sorted(rules.units, key=size)

    def affinity_names(self, members: Iterable[str]) -> list[str]:
        """The affinity groupings holding any of ``members``, in input order."""
        wanted = set(members)
        return [g.name for g in self.rules.groupings
                if g.rule == AFFINITY and wanted.intersection(g.members)] or ["(attachment)"]

    # -- one unit --------------------------------------------------------------------------

    def _place_unit(self, hsets: list[str], bsets: list[str]) -> bool:
        base, free = Trial(), hsets
        self.tries = 0
        if self.pins is not None:
            # Pinned host sets are where they are: put first in every trial.
            at = self.pins.host_set_at
            free = [r for r in hsets if r not in at]
            for root in sorted(r for r in hsets if r in at):
                if not self._host_ok(root, at[root], base):
                    return False
                self._put_host(root, at[root], base)
        if not free:
            if not self._place_backends(bsets, base):
                return False
            self._commit(base)
            return True
        order = sorted(free, key=lambda r: (-self.measure(self.total[r]), r))
        anchor, eligibility = order[0], self.eligibility[order[0]]
        heap, aside, chosen = eligibility.heap, [], None
        # With one host set, where its volumes can go depends on the anchor only
        # through the backends it reaches and its domains at server-volume
        # anti-affinity scopes: anchors alike (a rack's hosts) fail alike.
        near = sorted({rule.sv for s in self.rules.host_sets[anchor]
                       for rule in self.rules.anti_of.get(s, ()) if rule.sv is not None})
        failed: set[tuple] = set()
        self.tries = 0
        while self.tries < ANCHOR_TRIES:
            entry = self.run.pop(heap, eligibility.smallest)
            if entry is None:
                break
            aside.append(entry)
            self.tries += 1
            host = self.hosts[entry[0][-1]]
            alike = (self.pool.reach(host), *(host.domain(scope) for scope in near))
            if alike in failed:
                continue
            trial = base.copy() if base.host_of else Trial()
            if not self._host_ok(anchor, entry[0][-1], trial):
                continue
            self._put_host(anchor, entry[0][-1], trial)
            if not self._place_hosts(order[1:], trial):
                continue
            if self._place_backends(bsets, trial):
                chosen = trial
                break
            if len(order) == 1:
                failed.add(alike)
        for entry in aside:
            heapq.heappush(heap, entry)
        if chosen is None:
            return False
        self._commit(chosen)
        return True

    def _place_hosts(self, roots: Sequence[str], trial: Trial) -> bool:
        rules = self.rules
        for root in roots:
            scope, domain = "zone", None
            for placed, position in trial.host_of.items():
                host = self.hosts[position]
                if rules.rack_of.find(placed) == rules.rack_of.find(root):
                    scope, domain = "rack", host.domain("rack")
                    break
                domain = host.domain("zone")
            eligibility = self.eligibility[root]
            heap = self.run.domain_heap(eligibility, scope, domain)
            aside, found = [], None
            while len(aside) < ANCHOR_TRIES:
                entry = self.run.pop(heap, eligibility.smallest)
                if entry is None:
                    break
                aside.append(entry)
                if self._host_ok(root, entry[0][-1], trial):
                    found = entry[0][-1]
                    break
            for entry in aside:
                heapq.heappush(heap, entry)
            if found is None:
                return False
            self._put_host(root, found, trial)
        return True

    def _host_ok(self, root: str, position: int, trial: Trial) -> bool:
        if not self.run.fits(position, self.total[root], trial.used.get(position)):
            return False
        host = self.hosts[position]
        for server in self.fresh_servers[root]:
            for rule in self.rules.anti_of.get(server, ()):
                if rule.ss is not None:
                    domain = host.domain(rule.ss)
                    if rule.server_counts[domain] + trial.counts[(id(rule), "ss", domain)]:
                        return False
                if rule.sv is not None:
                    domain = host.domain(rule.sv)
                    if rule.volume_near[domain] + trial.counts[(id(rule), "vn", domain)]:
                        return False
        return True

    def _put_host(self, root: str, position: int, trial: Trial) -> None:
        trial.host_of[root] = position
        host = self.hosts[position]
        used = trial.used.get(position)
        if used is None:
            used = trial.used[position] = dict(self.run.usage.get(position, host.used))
        for rc, amount in self.total[root].items():
            used[rc] = used.get(rc, 0) + amount
        for server in self.fresh_servers[root]:
            for rule in self.rules.anti_of.get(server, ()):
                if rule.ss is not None:
                    trial.counts[(id(rule), "ss", host.domain(rule.ss))] += 1
                if rule.sv is not None:
                    trial.counts[(id(rule), "sn", host.domain(rule.sv))] += 1

    def _place_backends(self, roots: Sequence[str], trial: Trial) -> bool:
        for root in sorted(roots, key=lambda r: (-self.gb[r], r)):
            found = self._best_backend(root, trial)
            if found is None:
                return False
            trial.backend_of[root] = found
            trial.gb[found] += self.gb[root]
            for volume in self.fresh_volumes[root]:
                for rule in self.rules.anti_of.get(volume, ()):
                    backend = self.pool.backends[found]
                    if rule.vv is not None:
                        trial.counts[(id(rule), "vv", backend.domain(rule.vv))] += 1
                    if rule.sv is not None and backend.domain(rule.sv) is not None:
                        trial.counts[(id(rule), "vn", backend.domain(rule.sv))] += 1
        return True

    def candidates(self, root: str, host_of: Mapping[str, int]) -> Iterable[int]:
        """Backends every linked host reaches (own disks first), or all without links."""
        linked = self.rules.links[root]
        if not linked:
            return range(len(self.pool.backends))
        reach = self.pool.reach(self.hosts[host_of[linked[0]]])
        for other in linked[1:]:
            also = set(self.pool.reach(self.hosts[host_of[other]]))
            reach = tuple(i for i in reach if i in also)
        return reach

    def _best_backend(self, root: str, trial: Trial) -> int | None:
        pool, total, types = self.pool, self.gb[root], self.types[root]
        best, best_key = None, None
        candidates = self.candidates(root, trial.host_of)
        if self.pins is not None and root in self.pins.backend_set_at:
            pinned = self.pins.backend_set_at[root]  # a pinned volume's, if reached
            candidates = (pinned,) if pinned in candidates else ()
        for index in candidates:
            backend = pool.backends[index]
            if not types_ok(backend, types) or pool.free(index, trial.gb[index]) < total:
                continue
            if not self.backend_ok(root, index, trial.counts):
                continue
            # Reaching a host-local disk is the point of asking for affinity.
            key = (backend.scope != "host", pool.key(index, trial.gb[index]))
            if best_key is None or key < best_key:
                best, best_key = index, key
        return best

    def backend_ok(self, root: str, index: int, extra: Counter,
                   leaving: int | None = None) -> bool:
        """Anti-affinity of the set's volumes on backend ``index`` (one may be ``leaving``)."""
        backend = self.pool.backends[index]
        old = self.pool.backends[leaving] if leaving is not None else None
        for volume in self.fresh_volumes[root]:
            for rule in self.rules.anti_of.get(volume, ()):
                if rule.vv is not None:
                    domain = backend.domain(rule.vv)
                    own = old is not None and old.domain(rule.vv) == domain
                    if rule.volume_counts[domain] + extra[(id(rule), "vv", domain)] - own > 0:
                        return False
                if rule.sv is not None:
                    domain = backend.domain(rule.sv)
                    if domain is not None and (
                            rule.server_near[domain] + extra[(id(rule), "sn", domain)]):
                        return False
        return True

    def _commit(self, trial: Trial) -> None:
        for root, position in trial.host_of.items():
            if root not in self.pinned_idle:  # (its host may be down: nothing to consume)
                self.run.consume(position, self.total[root])
            self.host_of[root] = position
        for root, index in trial.backend_of.items():
            self.pool.used[index] += self.gb[root]
            self.backend_of[root] = index
        for (rule_id, kind, domain), count in trial.counts.items():
            rule = self.anti_by_id[rule_id]
            {"ss": rule.server_counts, "vv": rule.volume_counts, "sn": rule.server_near,
             "vn": rule.volume_near}[kind][domain] += count
