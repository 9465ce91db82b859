"""Hard affinity: a group's servers in the pass placed as one unit in one domain.

``affinity`` (at its scope) and ``network-proximity`` (rack) put every member
in one failure domain. Placing members one by one would let the first settle
on a host or rack the others cannot join; the unit is placed only where all
of them fit together, next to the members that stay, or not at all.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from fleetflow.scheduler.moves.passes import ALTERNATE_SCAN, Eligibility, MovePass, covers
from fleetflow.scheduler.policies import GroupRule
from fleetflow.scheduler.spec import SCOPES

_FINENESS = {scope: i for i, scope in enumerate(SCOPES)}  # host finest, zone coarsest
# Hosts a unit takes from a heap to find its rack or zone before ranking all
# the domains left instead (cheaper once most hosts are full).
_DOMAIN_POPS = 32

Members = Sequence[tuple[Mapping[str, int], Eligibility]]


def unit_scope(rule: GroupRule) -> tuple[str, str]:
    """The finest hard-affinity constraint (name, scope): coarser ones hold inside it."""
    return min(rule.affinity, key=lambda item: _FINENESS[item[1]])


def allowed_domains(run: MovePass, rule: GroupRule, scope: str) -> list | None:
    """Domains of ``scope`` next to the members that stay, best first; None if free."""
    fixed = [(name, aff_scope) for name, aff_scope in rule.affinity
             if rule.member_domains[name]]
    if not fixed:
        return None
    name, fixed_scope = min(fixed, key=lambda item: _FINENESS[item[1]])
    index = run.domain_index(fixed_scope)
    candidates = sorted(p for domain in rule.member_domains[name]
                        for p in index.get(domain, ()))
    # Every constraint's member domains come from the same member hosts, so a
    # host inside the finest fixed domain is inside the coarser ones as well.
    best: dict[Any, Any] = {}
    for position in candidates:
        domain, key = run.hosts[position].domain(scope), run.current_key(position)
        if domain not in best or key < best[domain]:
            best[domain] = key
    return sorted(best, key=best.__getitem__)


def place_unit(run: MovePass, members: Members, rule: GroupRule, scope: str,
               domains: Sequence[Any] | None) -> tuple[list[int] | None, int]:
    """Hosts for an affinity unit in one domain of ``scope``, and the domains with room.

    ``domains`` lists the allowed domains when members staying behind fix
    them; otherwise domains are tried in the order their best host for
    the first (largest) member comes out of its heap. A domain is tried
    only if its free resources, summed, hold the unit's. Nothing is consumed.
    """
    total: dict[str, int] = {}
    for resources, _ in members:
        for rc, amount in resources.items():
            total[rc] = total.get(rc, 0) + amount
    if domains is not None:
        roomy = 0
        for domain in domains:
            if run.roomy(scope, domain, total):
                roomy += 1
                choice = _try_domain(run, members, rule, scope, domain)
                if choice is not None:
                    return choice, roomy
        return None, roomy
    eligibility = members[0][1]
    if eligibility.unit_known_to_fail(scope, total) or not covers(run.bound(scope), total):
        return None, 0
    if scope == "host":
        return _place_on_a_host(run, members, rule, total)
    # The first member's heap gives domains best first; the usual first
    # few hosts settle it. Past that, every domain left is ranked at once
    # by its best host (none is better than the hosts already seen).
    rooms = run.rooms(scope)
    aside, seen, choice, tried = [], set(), None, 0
    exhausted = False
    while choice is None and len(aside) < _DOMAIN_POPS:
        entry = run.pop(eligibility.heap, eligibility.smallest)
        if entry is None:
            exhausted = True
            break
        aside.append(entry)
        domain = run.hosts[entry[0][-1]].domain(scope)
        if domain not in seen:
            seen.add(domain)
            if covers(rooms[domain], total):
                tried += 1
                choice = _try_domain(run, members, rule, scope, domain)
    for entry in aside:
        heapq.heappush(eligibility.heap, entry)
    if choice is None and not exhausted:
        ranked = []
        for domain, room in rooms.items():
            if domain in seen or not covers(room, total):
                continue
            heap = run.domain_heap(eligibility, scope, domain)
            entry = run.pop(heap, eligibility.smallest)
            if entry is not None:
                heapq.heappush(heap, entry)
                ranked.append((entry[0], domain))
        ranked.sort(key=lambda item: item[0])
        for _, domain in ranked:
            tried += 1
            choice = _try_domain(run, members, rule, scope, domain)
            if choice is not None:
                break
    if not tried:
        eligibility.failed_units.append((scope, total))
    return choice, tried


def _place_on_a_host(run: MovePass, members: Members, rule: GroupRule,
                     total: Mapping[str, int]) -> tuple[list[int] | None, int]:
    """Host scope: hosts come out of the first member's heap until one takes all."""
    eligibility = members[0][1]
    aside, choice, roomy = [], None, 0
    while choice is None:
        entry = run.pop(eligibility.heap, eligibility.smallest)
        if entry is None:
            break
        aside.append(entry)
        host = run.hosts[entry[0][-1]]
        if run.fits(entry[0][-1], total):
            roomy += 1
            choice = _try_domain(run, members, rule, "host", host.name)
    for entry in aside:
        heapq.heappush(eligibility.heap, entry)
    if not roomy:
        eligibility.failed_units.append(("host", dict(total)))
    return choice, roomy


def _try_domain(run: MovePass, members: Members, rule: GroupRule, scope: str,
                domain: Any) -> list[int] | None:
    """A host in ``domain`` for every member, in order, or None; nothing is consumed."""
    tentative: dict[int, dict[str, int]] = {}  # hosts chosen in this try -> usage
    keys: dict[int, Any] = {}
    placed: Counter = Counter()
    counts: Counter = Counter()

    def allowed(position: int, resources: Mapping[str, int],
                used: Mapping[str, int] | None) -> bool:
        if not run.fits(position, resources, used):
            return False
        if rule.limit is None:
            return True
        part = run.hosts[position].domain(rule.scope)
        return rule.counts[part] + counts[part] < rule.limit

    choice = []
    for resources, eligibility in members:
        best = None
        # Hosts already chosen in this try left the heaps' order: weigh them here.
        for position, used in tentative.items():
            if position in eligibility.members and allowed(position, resources, used) and (
                    best is None or keys[position] < keys[best]):
                best = position
        if scope == "host":
            position = run.domain_index("host").get(domain, (None,))[0]
            if (position is not None and position not in tentative
                    and position in eligibility.members
                    and allowed(position, resources, None)):
                best = position
        else:
            failed = eligibility.failed_in.setdefault((scope, domain), [])
            if any(covers(resources, f) for f in failed):
                return None
            heap = run.domain_heap(eligibility, scope, domain)
            aside, roomy = [], any(run.fits(p, resources) for p in tentative)
            while True:
                entry = run.pop(heap, eligibility.smallest)
                if entry is None:
                    break
                aside.append(entry)
                position = entry[0][-1]
                if position in tentative or not run.fits(position, resources):
                    continue
                roomy = True
                if allowed(position, resources, None):
                    if best is None or entry[0] < keys[best]:
                        best = position
                    break
            for entry in aside:
                heapq.heappush(heap, entry)
            if not roomy:
                failed.append(dict(resources))
        if best is None:
            return None
        host = run.hosts[best]
        used = tentative.get(best)
        if used is None:
            used = tentative[best] = dict(run.usage.get(best, host.used))
        for rc, amount in resources.items():
            used[rc] = used.get(rc, 0) + amount
        placed[best] += 1
        counts[host.domain(rule.scope)] += 1
        keys[best] = run.key(host, used, best, run.placed_on[best] + placed[best])
        choice.append(best)
    return choice


def unit_alternates(run: MovePass, primary: int, resources: Mapping[str, int],
                    eligibility: Eligibility, rule: GroupRule, scope: str,
                    count: int) -> list[int]:
    """Alternates of an affinity unit's member: only inside its primary's domain."""
    if count <= 0 or scope == "host":
        return []
    heap = run.domain_heap(eligibility, scope, run.hosts[primary].domain(scope))
    picks, aside = [], []
    while len(picks) < count and len(aside) < ALTERNATE_SCAN:
        entry = run.pop(heap, eligibility.smallest)
        if entry is None:
            break
        aside.append(entry)
        if run.alternate_ok(entry[0][-1], primary, resources, rule):
            picks.append(entry[0][-1])
    for entry in aside:
        heapq.heappush(heap, entry)
    return picks
