"""Faults injected into the fake hypervisor's hosts (in memory: a restarted host is healthy).

Per host: fail the next N builds, fail a seeded fraction of them, or be dead,
optionally hanging calls for a while first (a request stuck on its way to an
unreachable host).
"""

from __future__ import annotations

import dataclasses
import random
import threading


@dataclasses.dataclass
class HostFaults:
    """Faults injected into one host."""

    fail_next: int = 0
    fail_fraction: float = 0.0
    seed: int | None = None
    dead: bool = False
    # How long a call to a dead host hangs before failing: longer than the
    # caller's RPC timeout makes it look like a host that never answers.
    hang_seconds: float = 0.0
    rng: random.Random = dataclasses.field(default_factory=random.Random)
    revived: threading.Event = dataclasses.field(default_factory=threading.Event)

    def public(self) -> dict:
        return {"fail_next": self.fail_next, "fail_fraction": self.fail_fraction,
                "seed": self.seed, "dead": self.dead, "hang_seconds": self.hang_seconds}


class FaultBook:
    """The faults of every host of one driver."""

    def __init__(self):
        self._faults: dict[str, HostFaults] = {}
        self._lock = threading.Lock()

    def of(self, host: str) -> HostFaults:
        with self._lock:
            faults = self._faults.get(host)
            if faults is None:
                faults = self._faults[host] = HostFaults()
            return faults

    def change(self, host: str, fail_next: int | None = None,
               fail_fraction: float | None = None, seed: int | None = None,
               dead: bool | None = None, hang_seconds: float | None = None) -> dict:
        """Change a host's faults (arguments left None keep their value)."""
        faults = self.of(host)
        with self._lock:
            if fail_next is not None:
                faults.fail_next = int(fail_next)
            if fail_fraction is not None:
                faults.fail_fraction = float(fail_fraction)
            if seed is not None:
                faults.seed = seed
                faults.rng = random.Random(seed)
            if hang_seconds is not None:
                faults.hang_seconds = float(hang_seconds)
            if dead is not None and dead != faults.dead:
                faults.dead = bool(dead)
                if dead:
                    faults.revived = threading.Event()
                else:
                    # Calls hanging on the dead host go through now (late).
                    faults.revived.set()
        return faults.public()

    def is_reachable(self, host: str, closed: threading.Event) -> bool:
        """False when the host is dead; a hanging call waits to see if it comes back.

        A hanging call is a request stuck on its way to an unreachable host: if
        the host comes back in time (and the driver is not closing), the request
        still runs, late, after its caller gave up (what RabbitMQ does with a
        message queued for a host that restarts). Otherwise it fails.
        """
        faults = self.of(host)
        if not faults.dead:
            return True
        return bool(faults.hang_seconds > 0 and faults.revived.wait(faults.hang_seconds)
                    and not closed.is_set())

    def release_hanging(self) -> None:
        """End every hanging call's wait now (the driver is closing)."""
        with self._lock:
            for faults in self._faults.values():
                faults.revived.set()

    def take_build_fault(self, host: str) -> str | None:
        """Decide now whether this spawn fails (consumes fail_next, draws the fraction)."""
        faults = self.of(host)
        with self._lock:
            if faults.fail_next > 0:
                faults.fail_next -= 1
                return "injected failure (fail_next)"
            if faults.fail_fraction > 0 and faults.rng.random() < faults.fail_fraction:
                return "injected failure (fail_fraction)"
        return None
