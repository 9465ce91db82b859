"""The engine under :func:`fleetflow.scheduler.vcluster.place_vcluster`.

Hosts come from the heaps of :class:`MovePass` (one per distinct set of
static requirements, best host first, updated as the pass consumes room).
An affinity unit is tried on the best host for its largest host set (the
*anchor*); its other host sets go to the best host of the rack or zone the
unit forces them into, then its volumes to the best backend every linked
host reaches. Everything is tentative until the whole unit fits; otherwise
the next anchor is tried. Usage and member counts only grow, so the first
unit that fits nowhere ends the pass: the answer is all-or-nothing.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleetflow.common import states
from fleetflow.scheduler import capabilities as caps
from fleetflow.scheduler.moves import canonical, size_measure, sum_resources
from fleetflow.scheduler.moves_explain import domain_text
from fleetflow.scheduler.moves_pass import Eligibility, MovePass
from fleetflow.scheduler.snapshot import CloudSnapshot
from fleetflow.scheduler.spec import AFFINITY
from fleetflow.scheduler.vcluster import BackendState, VClusterPlacement
from fleetflow.scheduler.vcluster_alternates import backend_alternates, host_alternates
from fleetflow.scheduler.vcluster_explain import Step, chain, explain_unit
from fleetflow.scheduler.vcluster_pool import Pool, Trial, types_ok
from fleetflow.scheduler.vcluster_rules import AntiRule, Rules

# Anchors (or hosts of a forced domain) a unit tries before it is declared
# not to fit: bounds a failing pass on a large fleet to a few thousand checks.
ANCHOR_TRIES = 2048


class Placer:
    def __init__(self, rules: Rules, snapshot: CloudSnapshot,
                 backends: Sequence[BackendState], weigher: str):
        self.rules = rules
        self.hosts = snapshot.hosts
        up = [p for p, h in enumerate(self.hosts) if h.state == states.HOST_UP]
        self.host_steps = [Step("state", len(self.hosts), len(up), "host")]
        classes = sorted({rc for s in rules.servers.values() for rc in s.resources})
        self.run = MovePass(snapshot, up, classes, weigher)
        self.pool = Pool(backends, weigher)
        self.measure = size_measure(self.hosts, up, classes)
        self.total = {root: sum_resources(rules.servers[s].resources for s in members)
                      for root, members in rules.host_sets.items()}
        self.gb = {root: sum(rules.volumes[v].size_gb for v in members)
                   for root, members in rules.backend_sets.items()}
        self.types = {root: frozenset(rules.volumes[v].volume_type for v in members
                                      if rules.volumes[v].volume_type is not None)
                      for root, members in rules.backend_sets.items()}
        capacity_gb = sum(max(b.capacity_gb, 0) for b in self.pool.backends)
        self.gb_share = (lambda gb: gb / capacity_gb if capacity_gb else float(gb > 0))
        self.eligibility: dict[str, Eligibility] = {}
        self.host_of: dict[str, int] = {}
        self.backend_of: dict[str, int] = {}
        self.tries = 0
        self.linked_backends: dict[str, list[int]] = {}  # host set -> backends it reaches

    # -- the pass ---------------------------------------------------------------------

    def run_pass(self, alternates: int) -> VClusterPlacement:
        reason = self._static()
        if reason is not None:
            return VClusterPlacement(fits=False, explanation=reason)
        for hsets, bsets in self._ordered_units():
            if not self._place_unit(hsets, bsets):
                return VClusterPlacement(fits=False, explanation=explain_unit(self, hsets, bsets))
        return self._answer(alternates)

    def _ordered_units(self) -> list[tuple[list[str], list[str]]]:
        rules = self.rules

        def size(unit: tuple[list[str], list[str]]) -> tuple:
            hsets, bsets = unit
            members = [*(s for r in hsets for s in rules.host_sets[r]),
                       *(v for r in bsets for v in rules.backend_sets[r])]
            share = max(self.measure(sum_resources(self.total[r] for r in hsets)),
                        self.gb_share(sum(self.gb[r] for r in bsets)))
            constraint = len(members) + sum(len(rules.anti_of.get(m, ())) for m in members)
            return (-share, -constraint, min(members))
        return sorted(rules.units, key=size)

    # -- static filters ------------------------------------------------------------------

    def _static(self) -> str | None:
        """Eligible hosts per host set; the first member no host or backend could ever take."""
        rules, pool = self.rules, self.pool
        count = len(pool.backends)
        judged: dict[tuple, list[Step]] = {}
        for root in sorted(rules.backend_sets):
            members = rules.backend_sets[root]
            for name in members:
                volume = rules.volumes[name]
                # Clusters repeat a few volume kinds: judge each (type, size) once.
                signature = (volume.volume_type, volume.size_gb)
                if signature not in judged:
                    judged[signature] = self._volume_steps(volume.volume_type, volume.size_gb)
                steps = judged[signature]
                if not steps[-1].after:
                    return f"volume {name}: {chain(steps)}"
            if len(members) > 1:
                total, types = self.gb[root], self.types[root]
                kept = [i for i in range(count) if types_ok(pool.backends[i], types)
                        and pool.free(i) >= total]
                if not kept:
                    return (f"grouping {self.affinity_names(members)[0]} (affinity, backend): "
                            f"no backend holds {', '.join(members)} together "
                            f"({total} GB{', ' + ', '.join(sorted(types)) if types else ''}): "
                            f"{count} backends -> 0")
        reaching: dict[str, set[tuple[str, ...]]] = {}
        for backend_set, linked in rules.links.items():
            for root in linked:
                reaching.setdefault(root, set()).add(tuple(sorted(self.types[backend_set])))
        by_signature: dict[tuple, Eligibility] = {}
        matchers: dict[str, Any] = {}
        for root in sorted(rules.host_sets):
            members = rules.host_sets[root]
            wanted = sorted({canonical(rules.servers[s].capabilities) for s in members
                             if rules.servers[s].capabilities})
            reach = sorted(reaching.get(root, ()))
            signature = (tuple(wanted), tuple(reach))
            eligibility = by_signature.get(signature)
            if eligibility is None:
                eligibility = self._eligibility(members, reach, matchers)
                by_signature[signature] = eligibility
                if not eligibility.positions:
                    return f"{_subject(members)}: {chain(eligibility.steps)}"
            self.eligibility[root] = eligibility
            eligibility.admit(self.total[root])
        for eligibility in by_signature.values():
            self.run.register(eligibility)
        return None

    def _volume_steps(self, volume_type: str | None, size_gb: int) -> list[Step]:
        pool = self.pool
        steps, left = [], list(range(len(pool.backends)))
        if volume_type is not None:
            kept = [i for i in left if volume_type in pool.backends[i].volume_types]
            steps.append(Step(f"volume_type {volume_type}", len(left), len(kept), "backend"))
            left = kept
        kept = [i for i in left if pool.free(i) >= size_gb]
        steps.append(Step("capacity", len(left), len(kept), "backend"))
        return steps

    def _eligibility(self, members: list[str], reach: list[tuple[str, ...]],
                     matchers: dict[str, Any]) -> Eligibility:
        rules, hosts = self.rules, self.hosts
        steps = list(self.host_steps)
        left = list(self.run.destinations)
        for name in members:
            wanted = rules.servers[name].capabilities
            if not wanted:
                continue
            key = canonical(wanted)
            if key not in matchers:
                matchers[key] = caps.host_matcher(caps.parse_requirements(wanted))
            kept = [p for p in left if matchers[key](hosts[p].capabilities)]
            label = "capabilities" if len(members) == 1 else f"capabilities of {name}"
            steps.append(Step(label, len(left), len(kept), "host"))
            left = kept
        for types in reach:
            wanted_types = frozenset(types)
            ok = {i for i, b in enumerate(self.pool.backends) if types_ok(b, wanted_types)}
            kept = [p for p in left if any(i in ok for i in self.pool.reach(hosts[p]))]
            label = ("reaches a backend" if not types
                     else f"reaches volume_type {'+'.join(types)}")
            steps.append(Step(label, len(left), len(kept), "host"))
            left = kept
        return Eligibility(left, steps)

    def affinity_names(self, members: Iterable[str]) -> list[str]:
        """The affinity groupings holding any of ``members``, in input order."""
        wanted = set(members)
        return [g.name for g in self.rules.groupings
                if g.rule == AFFINITY and wanted.intersection(g.members)] or ["(attachment)"]

    # -- one unit --------------------------------------------------------------------------

    def _place_unit(self, hsets: list[str], bsets: list[str]) -> bool:
        if not hsets:
            trial = Trial()
            if not self._place_backends(bsets, trial):
                return False
            self._commit(trial)
            return True
        order = sorted(hsets, key=lambda r: (-self.measure(self.total[r]), r))
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
            trial = Trial()
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
        for server in self.rules.host_sets[root]:
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
        for server in self.rules.host_sets[root]:
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
            for volume in self.rules.backend_sets[root]:
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
        for index in self.candidates(root, trial.host_of):
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
        for volume in self.rules.backend_sets[root]:
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
            self.run.consume(position, self.total[root])
            self.host_of[root] = position
        for root, index in trial.backend_of.items():
            self.pool.used[index] += self.gb[root]
            self.backend_of[root] = index
        rules: dict[int, AntiRule] = {id(r): r for r in self.rules.anti}
        for (rule_id, kind, domain), count in trial.counts.items():
            rule = rules[rule_id]
            {"ss": rule.server_counts, "vv": rule.volume_counts, "sn": rule.server_near,
             "vn": rule.volume_near}[kind][domain] += count

    # -- the answer ------------------------------------------------------------------------

    def _answer(self, alternates: int) -> VClusterPlacement:
        rules = self.rules
        for backend_set, linked in rules.links.items():
            for root in linked:
                self.linked_backends.setdefault(root, []).append(self.backend_of[backend_set])
        hosts: dict[str, list[str]] = {}
        # By name, not input order: alternates rotate over shared candidates.
        for name in sorted(rules.servers):
            position = self.host_of[rules.host_set_of[name]]
            others = host_alternates(self, name, position, alternates)
            hosts[name] = [self.hosts[p].name for p in (position, *others)]
        backends: dict[str, list[str]] = {}
        for name in sorted(rules.volumes):
            index = self.backend_of[rules.backend_set_of[name]]
            others = backend_alternates(self, name, index, alternates)
            backends[name] = [self.pool.backends[i].name for i in (index, *others)]
        return VClusterPlacement(fits=True, hosts=hosts, backends=backends,
                                 attachments=dict(sorted(rules.attachments.items())),
                                 domains=self._domains())

    def _domains(self) -> dict[str, dict[str, Any]]:
        rules = self.rules
        found: dict[str, dict[str, Any]] = {}
        for grouping in rules.groupings:
            shown: dict[str, Any] = {}
            for member in grouping.members:
                if member in rules.servers:
                    host = self.hosts[self.host_of[rules.host_set_of[member]]]
                    scope = grouping.scope if grouping.scope in ("host", "rack", "zone") \
                        else "host"
                    shown[member] = _json(host.domain(scope))
                else:
                    backend = self.pool.backends[self.backend_of[rules.backend_set_of[member]]]
                    scope = ("backend" if grouping.rule == AFFINITY
                             else grouping.scope or "rack")
                    shown[member] = _json(backend.domain(scope))
            found[grouping.name] = shown
        return found


def _json(domain: Any) -> Any:
    return None if domain is None else domain_text(domain)


def _subject(members: Sequence[str]) -> str:
    return f"server {members[0]}" if len(members) == 1 else f"servers {', '.join(members)}"
