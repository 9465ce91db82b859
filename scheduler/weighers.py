"""Weighers: the order in which fitting hosts are preferred (lower key first).

Keys are compared as tuples, most important part first, instead of Nova's
normalised weighted sum. With a sum, every placement changes every host's
normalised weight; with tuples a host's key depends only on its own usage,
so one placement updates one heap entry and 1,000 instances are placed in
O(N log H). The parts, in order:

1. soft group policy (applied per failure domain by the scheduler):
   soft-anti-affinity prefers domains with fewer members, soft-affinity more;
2. recent build failures: a host that failed builds lately is used only when
   hosts without failures are exhausted (Nova's BuildFailureWeigher uses a
   multiplier of 10^6 for the same effect);
3. resource use: ``spread`` (default) prefers the least used host, ``pack``
   the most used one that still fits. Use is the dominant share: the largest
   used/capacity fraction over the resource classes the request asks for, so
   a host with free VCPUs but no free memory counts as full;
4. instances this pass already put on the host (fewer first for spread),
   which only matters when usage cannot tell hosts apart (a request
   without resources);
5. the host's position in the snapshot (by name), so results are repeatable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fleetflow.scheduler.snapshot import HostState

SPREAD = "spread"
PACK = "pack"
WEIGHERS = (SPREAD, PACK)

HostKey = tuple[int, float, int, int]


def host_key_function(weigher: str, resources: Mapping[str, int]
                      ) -> Callable[[HostState, Mapping[str, int], int, int], HostKey]:
    """Build ``key(host, used, position, placed_in_pass)`` for one request."""
    if weigher not in WEIGHERS:
        raise ValueError(f"unknown weigher {weigher!r}; expected one of {WEIGHERS}")
    # With nothing requested, weigh by the usual classes so spread still spreads.
    classes = tuple(resources) or ("VCPU", "MEMORY_MB")
    sign = 1 if weigher == SPREAD else -1

    def key(host: HostState, used: Mapping[str, int], position: int, placed: int = 0) -> HostKey:
        # The dominant share; runs once per candidate host per request, so kept tight.
        share = 0.0
        capacity = host.capacity
        for rc in classes:
            total = capacity.get(rc)
            if total:
                fraction = used.get(rc, 0) / total
                if fraction > share:
                    share = fraction
        return (host.recent_failures, sign * share, sign * placed, position)
    return key
