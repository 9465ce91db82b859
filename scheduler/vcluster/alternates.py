"""Alternates of a placed virtual cluster: where one member alone could go instead.

A retry that loses a host or backend to a race moves one member, so an
alternate must keep every rule with all the other members where they are:
room given every placement, capabilities, reach between servers and their
volumes, the unit's shared domains and the anti-affinity limits. Members
sharing a host or a backend by affinity have none (moving one alone would
break it).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from fleetflow.scheduler.moves.passes import ALTERNATE_SCAN

if TYPE_CHECKING:
    from fleetflow.scheduler.vcluster.passes import Placer

_NONE: Counter = Counter()


class _Rotation:
    cursor = 0


def host_alternates(placer: Placer, server: str, primary: int, count: int) -> list[int]:
    """Up to ``count`` other hosts for ``server``, best first, rotating over candidates."""
    rules = placer.rules
    root = rules.host_set_of[server]
    if count <= 0 or len(rules.host_sets[root]) > 1:
        return []
    eligibility, run = placer.eligibility[root], placer.run
    volumes = placer.linked_backends.get(root, [])
    if volumes:
        # Only hosts reaching its volumes qualify: those of one rack, or none
        # but the primary when a volume is on the primary's own disk.
        backend = placer.pool.backends[volumes[0]]
        if backend.scope == "host":
            return []
        ranked = [key[-1] for key in sorted(
            run.current_key(p) for p in run.domain_index("rack").get(backend.domain("rack"), ())
            if p in eligibility.members)]
        holder = _Rotation()
    else:
        if eligibility.ranked is None:
            eligibility.ranked = [key[-1] for key in sorted(
                run.current_key(p) for p in eligibility.positions)]
        ranked, holder = eligibility.ranked, eligibility
    resources = rules.servers[server].resources
    home = placer.hosts[primary]
    # Other servers of its affinities stay where they are: same domain as the primary.
    scopes = rules.server_affinity_scopes.get(server, ())
    picks: list[int] = []
    scanned, start = 0, holder.cursor
    limit = min(len(ranked), ALTERNATE_SCAN)
    while len(picks) < count and scanned < limit:
        order = (start + scanned) % len(ranked)
        scanned += 1
        position = ranked[order]
        if position == primary or not run.fits(position, resources):
            continue
        host = placer.hosts[position]
        if any(host.domain(scope) != home.domain(scope) for scope in scopes):
            continue
        reach = placer.pool.reach(host)
        if any(index not in reach for index in volumes):
            continue
        if _host_anti_ok(placer, server, host, home):
            picks.append(order)
    if ranked:
        holder.cursor = (start + scanned) % len(ranked)
    return [ranked[order] for order in sorted(picks)]


def _host_anti_ok(placer: Placer, server: str, host, home) -> bool:
    for rule in placer.rules.anti_of.get(server, ()):
        if rule.ss is not None:
            domain = host.domain(rule.ss)
            if rule.server_counts[domain] - (home.domain(rule.ss) == domain) > 0:
                return False
        if rule.sv is not None and rule.volume_near[host.domain(rule.sv)]:
            return False
    return True


def backend_alternates(placer: Placer, volume: str, primary: int, count: int) -> list[int]:
    """Up to ``count`` other backends for ``volume``, best first (own disks first)."""
    rules, pool = placer.rules, placer.pool
    root = rules.backend_set_of[volume]
    if count <= 0 or len(rules.backend_sets[root]) > 1:
        return []
    size = rules.volumes[volume].size_gb
    types = placer.types[root]
    found = []
    for index in placer.candidates(root, placer.host_of):
        backend = pool.backends[index]
        if index == primary or not types <= backend.volume_types or pool.free(index) < size:
            continue
        if placer.backend_ok(root, index, _NONE, leaving=primary):
            found.append(((backend.scope != "host", pool.key(index)), index))
    found.sort()
    return [index for _, index in found[:count]]
