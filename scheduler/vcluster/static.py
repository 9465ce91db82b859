"""Static filters of a virtual cluster pass: what no placement in the pass can change.

Before the first unit, each volume is judged against the backends (type,
capacity) and each new host set gets its :class:`Eligibility`: the up hosts
passing its servers' capabilities, reaching backends of its volumes' types
and, when pinned members bind it, in their rack or zone and reaching their
backends. Host sets alike share one eligibility (and its heap). The first
member nothing could ever take ends the pass with the filter chain that
left nothing (``server db: state: 3 hosts -> 2, capabilities: 2 hosts -> 0``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fleetflow.scheduler import capabilities as caps
from fleetflow.scheduler.moves.passes import Eligibility
from fleetflow.scheduler.moves.place import canonical
from fleetflow.scheduler.vcluster.explain import Step, chain
from fleetflow.scheduler.vcluster.pool import types_ok

if TYPE_CHECKING:
    from fleetflow.scheduler.vcluster.passes import Placer


def static_filters(placer: Placer) -> str | None:
    """Eligible hosts per host set; the first member no host or backend could ever take."""
    rules, pool, pins = placer.rules, placer.pool, placer.pins
    if pins is not None:
        reason = pins.check()
        if reason is not None:
            return reason
    count = len(pool.backends)
    judged: dict[tuple, list[Step]] = {}
    for root in sorted(rules.backend_sets):
        members = placer.fresh_volumes[root]
        if pins is not None and root in pins.backend_set_at:
            reason = pins.backend_set_reason(placer, root)
            if reason is not None:
                return reason
            continue
        for name in members:
            volume = rules.volumes[name]
            # Clusters repeat a few volume kinds: judge each (type, size) once.
            signature = (volume.volume_type, volume.size_gb)
            if signature not in judged:
                judged[signature] = _volume_steps(placer, volume.volume_type, volume.size_gb)
            steps = judged[signature]
            if not steps[-1].after:
                return f"volume {name}: {chain(steps)}"
        if len(members) > 1:
            total, types = placer.gb[root], placer.types[root]
            kept = [i for i in range(count) if types_ok(pool.backends[i], types)
                    and pool.free(i) >= total]
            if not kept:
                return (f"grouping {placer.affinity_names(members)[0]} (affinity, backend): "
                        f"no backend holds {', '.join(members)} together "
                        f"({total} GB{', ' + ', '.join(sorted(types)) if types else ''}): "
                        f"{count} backends -> 0")
    reaching: dict[str, set[tuple[str, ...]]] = {}
    for backend_set, linked in rules.links.items():
        for root in linked:
            reaching.setdefault(root, set()).add(tuple(sorted(placer.types[backend_set])))
    by_signature: dict[tuple, Eligibility] = {}
    matchers: dict[str, Any] = {}
    typed: dict[tuple[str, ...], set[int]] = {}  # volume types -> backends having them
    for root in sorted(rules.host_sets):
        members = rules.host_sets[root]
        reach = sorted(reaching.get(root, ()))
        if pins is not None and root in pins.host_set_at:
            reason = pins.host_set_reason(placer, root, reach, matchers)
            if reason is not None:
                return reason
            continue
        wanted = sorted({canonical(rules.servers[s].capabilities) for s in members
                         if rules.servers[s].capabilities})
        force = pins.force(root) if pins is not None else ()
        signature = (tuple(wanted), tuple(reach), force)
        eligibility = by_signature.get(signature)
        if eligibility is None:
            eligibility = _eligibility(placer, members, reach, matchers, typed, force)
            by_signature[signature] = eligibility
            if not eligibility.positions:
                return f"{_subject(members)}: {chain(eligibility.steps)}"
        placer.eligibility[root] = eligibility
        eligibility.admit(placer.total[root])
    for eligibility in by_signature.values():
        placer.run.register(eligibility)
    return None


def _volume_steps(placer: Placer, volume_type: str | None, size_gb: int) -> list[Step]:
    pool = placer.pool
    steps, left = [], list(range(len(pool.backends)))
    if volume_type is not None:
        kept = [i for i in left if volume_type in pool.backends[i].volume_types]
        steps.append(Step(f"volume_type {volume_type}", len(left), len(kept), "backend"))
        left = kept
    kept = [i for i in left if pool.free(i) >= size_gb]
    steps.append(Step("capacity", len(left), len(kept), "backend"))
    return steps


def _eligibility(placer: Placer, members: list[str], reach: list[tuple[str, ...]],
                 matchers: dict[str, Any], typed: dict[tuple[str, ...], set[int]],
                 force: tuple = ()) -> Eligibility:
    rules, hosts = placer.rules, placer.hosts
    steps = list(placer.host_steps)
    left = list(placer.run.destinations)
    for kind, value, pinned in force:  # where pinned members bind this host set
        if kind == "reach":
            kept = [p for p in left if value in placer.pool.reach(hosts[p])]
            label = f"reaches backend {placer.pool.backends[value].name} of pinned {pinned}"
        else:
            # The rack or zone comes first (``left``: every up host): its index is the answer.
            kept = list(placer.run.domain_index(kind).get(value, ()))
            label = f"{kind} of pinned {pinned}"
        steps.append(Step(label, len(left), len(kept), "host"))
        left = kept
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
        ok = typed.get(types)
        if ok is None:
            wanted_types = frozenset(types)
            ok = typed[types] = {i for i, b in enumerate(placer.pool.backends)
                                 if types_ok(b, wanted_types)}
        kept = [p for p in left if any(i in ok for i in placer.pool.reach(hosts[p]))]
        label = ("reaches a backend" if not types
                 else f"reaches volume_type {'+'.join(types)}")
        steps.append(Step(label, len(left), len(kept), "host"))
        left = kept
    return Eligibility(left, steps)


def _subject(members: Sequence[str]) -> str:
    return f"server {members[0]}" if len(members) == 1 else f"servers {', '.join(members)}"
