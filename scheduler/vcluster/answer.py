"""The answer of a virtual cluster pass that fits: every member where it goes, with
alternates, attachments and each grouping's domains.

Pinned members are in it too, each with its one host or backend and no
alternates, so every grouping's domains can be shown whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetflow.scheduler.moves.explain import domain_text
from fleetflow.scheduler.spec import AFFINITY
from fleetflow.scheduler.vcluster.alternates import backend_alternates, host_alternates
from fleetflow.scheduler.vcluster.place import VClusterPlacement

if TYPE_CHECKING:
    from fleetflow.scheduler.vcluster.passes import Placer


def answer(placer: Placer, alternates: int) -> VClusterPlacement:
    rules, pins = placer.rules, placer.pins
    for backend_set, linked in rules.links.items():
        for root in linked:
            placer.linked_backends.setdefault(root, []).append(placer.backend_of[backend_set])
    pinned_servers = pins.server_at if pins is not None else {}
    pinned_volumes = pins.volume_at if pins is not None else {}
    hosts: dict[str, list[str]] = {}
    # By name, not input order: alternates rotate over shared candidates.
    for name in sorted(rules.servers):
        position = placer.host_of[rules.host_set_of[name]]
        others = (host_alternates(placer, name, position, alternates)
                  if name not in pinned_servers else [])
        hosts[name] = [placer.hosts[p].name for p in (position, *others)]
    backends: dict[str, list[str]] = {}
    for name in sorted(rules.volumes):
        index = placer.backend_of[rules.backend_set_of[name]]
        others = (backend_alternates(placer, name, index, alternates)
                  if name not in pinned_volumes else [])
        backends[name] = [placer.pool.backends[i].name for i in (index, *others)]
    return VClusterPlacement(fits=True, hosts=hosts, backends=backends,
                             attachments=dict(sorted(rules.attachments.items())),
                             domains=_domains(placer))


def _domains(placer: Placer) -> dict[str, dict[str, Any]]:
    rules = placer.rules
    found: dict[str, dict[str, Any]] = {}
    for grouping in rules.groupings:
        shown: dict[str, Any] = {}
        for member in grouping.members:
            if member in rules.servers:
                host = placer.hosts[placer.host_of[rules.host_set_of[member]]]
                scope = grouping.scope if grouping.scope in ("host", "rack", "zone") else "host"
                shown[member] = _json(host.domain(scope))
            else:
                backend = placer.pool.backends[placer.backend_of[rules.backend_set_of[member]]]
                scope = "backend" if grouping.rule == AFFINITY else grouping.scope or "rack"
                shown[member] = _json(backend.domain(scope))
        found[grouping.name] = shown
    return found


def _json(domain: Any) -> Any:
    return None if domain is None else domain_text(domain)
