"""Why a virtual cluster did not fit: the words of ``VClusterPlacement.explanation``.

An operator reads them to decide what to free or relax, so each names the
member, filter or grouping that left nothing, with the counts before and
after (``volume db-1: volume_type ssd: 20 backends -> 0``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetflow.scheduler.vcluster.passes import Placer


@dataclasses.dataclass(frozen=True)
class Step:
    """One filter's effect on ``before`` candidates (hosts, backends, racks...)."""

    name: str
    before: int
    after: int
    noun: str

    def __str__(self) -> str:
        return f"{self.name}: {self.before} {self.noun}s -> {self.after}"


def resources_label(short_of: Sequence[str]) -> str:
    """``resources (VCPU, DISK_GB)``: the step named with the classes that ran out."""
    return f"resources ({', '.join(short_of)})" if short_of else "resources"


def chain(steps: Sequence[Step]) -> str:
    """Only the steps that removed candidates; the last one when none did."""
    removing = [s for s in steps if s.after < s.before]
    return ", ".join(str(s) for s in removing or steps[-1:])


def _subject(kind: str, members: Sequence[str]) -> str:
    return f"{kind} {members[0]}" if len(members) == 1 else f"{kind}s {', '.join(members)}"


def explain_unit(placer: Placer, hsets: Sequence[str], bsets: Sequence[str]) -> str:
    """The first member of the unit nothing can take now, else the unit's affinity."""
    rules, run, pool, pins = placer.rules, placer.run, placer.pool, placer.pins
    for root in sorted(hsets):
        members = placer.fresh_servers[root]
        if not members:
            continue
        subject = _subject("server", members)
        if pins is not None and root in pins.host_set_at:
            positions, steps = [pins.host_set_at[root]], []
            subject += (f" (host {run.hosts[positions[0]].name} of pinned "
                        f"{pins.pinned_in_host_set(root)})")
        else:
            positions = placer.eligibility[root].positions
            steps = placer.eligibility[root].steps
        fitting = [p for p in positions if run.fits(p, placer.total[root])]
        if not fitting:
            steps = [*steps, Step(resources_label(run.short_of(positions, placer.total[root])),
                                  len(positions), 0, "host")]
            return f"{subject}: {chain(steps)}"
        reason = _anti(subject,
                       [(rule, rule.ss, rule.server_counts) for s in members
                        for rule in rules.anti_of.get(s, ()) if rule.ss is not None]
                       + [(rule, rule.sv, rule.volume_near) for s in members
                          for rule in rules.anti_of.get(s, ()) if rule.sv is not None],
                       [run.hosts[p].domain for p in fitting], "host")
        if reason:
            return reason
    for root in sorted(bsets):
        members = placer.fresh_volumes[root]
        if not members:
            continue
        subject = _subject("volume", members)
        candidates = range(len(pool.backends))
        if pins is not None and root in pins.backend_set_at:
            candidates = [pins.backend_set_at[root]]
            subject += (f" (backend {pool.backends[candidates[0]].name} of pinned "
                        f"{pins.pinned_in_backend_set(root)})")
        types, total = placer.types[root], placer.gb[root]
        typed = [i for i in candidates if types <= pool.backends[i].volume_types]
        fitting = [i for i in typed if pool.free(i) >= total]
        if not fitting:
            return f"{subject}: {Step('capacity', len(typed), 0, 'backend')}"
        reason = _anti(subject,
                       [(rule, rule.vv, rule.volume_counts) for v in members
                        for rule in rules.anti_of.get(v, ()) if rule.vv is not None]
                       + [(rule, rule.sv, rule.server_near) for v in members
                          for rule in rules.anti_of.get(v, ()) if rule.sv is not None],
                       [pool.backends[i].domain for i in fitting], "backend")
        if reason:
            return reason
    members = [*(s for r in hsets for s in rules.host_sets[r]),
               *(v for r in bsets for v in rules.backend_sets[r])]
    if len(members) == 1:
        return f"{_subject('server' if hsets else 'volume', members)}: no candidate left"
    name = placer.affinity_names(members)[0]
    # (A unit whose host sets are all pinned tries no anchor.)
    tried = (f" ({placer.tries} anchor hosts tried)"
             if hsets and (placer.tries or placer.pins is None) else "")
    return (f"grouping {name} (affinity): no placement holds {', '.join(sorted(members))} "
            f"together{tried}")


def _anti(subject: str, limits, domain_of, noun: str) -> str | None:
    """The anti-affinity grouping that leaves no candidate domain, or all of them together."""
    survivors = list(range(len(domain_of)))
    names: list[str] = []
    for rule, scope, counts in limits:
        domains = {domain_of[i](scope) for i in range(len(domain_of))}
        free = {d for d in domains if d is None or not counts[d]}
        if not free:
            return (f"grouping {rule.name} (anti-affinity, {scope}): "
                    f"{len(domains)} {scope}s -> 0")
        survivors = [i for i in survivors if domain_of[i](scope) in free]
        if rule.name not in names:
            names.append(rule.name)
    if names and not survivors:
        return (f"{subject}: groupings {', '.join(names)} (anti-affinity) together: "
                f"{len(domain_of)} {noun}s -> 0")
    return None
