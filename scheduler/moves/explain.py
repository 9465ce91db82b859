"""Why a server of an evacuation found no host: the words of ``MovePlacement.unplaced``.

An operator reads them to decide what to free, skip or retarget, so each
names the filter or group rule that left no host, with the host counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleetflow.scheduler.filters import FilterStep
from fleetflow.scheduler.moves.passes import Eligibility, MovePass
from fleetflow.scheduler.policies import GroupRule
from fleetflow.scheduler.spec import ANTI_AFFINITY


def chain(steps: Sequence[FilterStep]) -> str:
    """``state: 100 -> 90, resources: 90 -> 0``: only the steps that removed hosts."""
    return ", ".join(str(s) for s in steps if s.after < s.before)


def domain_text(domain: Any) -> str:
    """A failure domain as an operator writes it: a host name, or region/zone/rack."""
    return "/".join(domain) if isinstance(domain, tuple) else str(domain)


def explain_server(run: MovePass, steps: Sequence[FilterStep], eligibility: Eligibility,
                   resources: Mapping[str, int], rule: GroupRule | None, group: str,
                   fitting: dict) -> str:
    """The filter chain for one server with the usage of the pass; ``rule`` if it limits.

    Resources come before the group rule: the hosts with room are few once a
    server fails, and ``fitting`` keeps them for servers alike, so each
    group's count is taken over a handful of hosts, not the fleet.
    """
    found = [*steps, *eligibility.steps]
    cache = (id(eligibility), tuple(sorted(resources.items())))
    survivors = fitting.get(cache)
    if survivors is None:
        survivors = fitting[cache] = [p for p in eligibility.positions
                                      if run.fits(p, resources)]
    kept = set(survivors)
    lacking = run.short_of((p for p in eligibility.positions if p not in kept), resources)
    found.append(FilterStep("resources", len(eligibility.positions), len(survivors),
                            short_of=lacking))
    if rule is not None:
        before = len(survivors)
        survivors = [p for p in survivors if rule.allows(run.hosts[p])]
        found.append(FilterStep(ANTI_AFFINITY, before, len(survivors), note=f"group {group}"))
    text = chain(found)
    if not text:
        text = "no hosts to choose from" if not survivors else "no host took it"
    return f"no host fits: {text}"


def explain_unit(group: str, policy: str, scope: str, resources: Sequence[Mapping[str, int]],
                 staying: Sequence[str] | None, open_domains: int, roomy: int,
                 steps: Sequence[FilterStep]) -> str:
    """Why an affinity unit found no domain.

    ``staying``: the domains of members not moving, when they fix the unit's;
    ``open_domains``: how many of those hold destinations; ``roomy``: domains
    tried whose free resources, summed, hold the unit's.
    """
    total: dict[str, int] = {}
    for one in resources:
        for rc, amount in one.items():
            total[rc] = total.get(rc, 0) + amount
    need = ", ".join(f"{rc} {n}" for rc, n in sorted(total.items()))
    count = len(resources)
    subject = f"its {count} members need" if count > 1 else "its member needs"
    if scope == "host":
        text = f"group {group} ({policy}): {subject} one host with {need or 'nothing'} free"
    else:
        text = (f"group {group} ({policy}): {subject} one {scope} that holds them all"
                + (f" ({need} in total)" if need else ""))
    if staying is not None:
        text += f"; members not moving are in {', '.join(staying)}"
        if not open_domains:
            text += ", where no host is a destination"
    if roomy:
        text += f"; {roomy} {scope}{'s' if roomy != 1 else ''} with that room cannot take them"
    else:
        text += f"; no {scope} has that room"
    filters = chain(steps)
    return f"{text} ({filters})" if filters else text
