"""Faults injected into the fake hypervisor's hosts and servers.

Two kinds, by who must see them:

- in memory, per driver (a restarted process is healthy again): fail the next
  N builds, fail a seeded fraction of them, and how long calls to a dead host
  hang before failing (a request stuck on its way to an unreachable host);
- in the state file, seen by every process sharing it: a host being dead (no
  process revives a host by starting), the next N moves to a host failing,
  and per server whether its moves fail and whether it can be live-migrated.
  A move is finished by whichever process touches it next, so the faults that
  decide its outcome must not live in one process's memory.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time

from fleetflow.compute.exceptions import HostDead

# How often a call hanging on a dead host looks whether another process
# sharing the state file revived it (this process's revivals wake it at once).
REVIVE_POLL_S = 0.2


@dataclasses.dataclass
class HostFaults:
    """Faults injected into one host, in this process only."""

    fail_next: int = 0
    fail_fraction: float = 0.0
    seed: int | None = None
    # How long a call to a dead host hangs before failing: longer than the
    # caller's RPC timeout makes it look like a host that never answers.
    hang_seconds: float = 0.0
    rng: random.Random = dataclasses.field(default_factory=random.Random)

    def public(self) -> dict:
        return {"fail_next": self.fail_next, "fail_fraction": self.fail_fraction,
                "seed": self.seed, "hang_seconds": self.hang_seconds}


class FaultBook:
    """The in-memory faults of every host of one driver."""

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
               hang_seconds: float | None = None) -> dict:
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
        return faults.public()

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


# -- in the state file -------------------------------------------------------


def is_dead(conn, host: str) -> bool:
    row = conn.execute("SELECT dead FROM host_faults WHERE host = ?", (host,)).fetchone()
    return bool(row and row[0])


def dead_hosts(conn) -> set[str]:
    return {row[0] for row in conn.execute("SELECT host FROM host_faults WHERE dead = 1")}


def host_faults(conn, host: str) -> dict:
    row = conn.execute("SELECT dead, fail_next_moves FROM host_faults WHERE host = ?",
                       (host,)).fetchone()
    return {"dead": bool(row and row[0]), "fail_next_moves": int(row[1]) if row else 0}


def set_host_faults(conn, host: str, dead: bool | None = None,
                    fail_next_moves: int | None = None) -> None:
    """Change a host's shared faults (arguments left None keep their value)."""
    conn.execute("INSERT OR IGNORE INTO host_faults (host) VALUES (?)", (host,))
    if dead is not None:
        conn.execute("UPDATE host_faults SET dead = ? WHERE host = ?", (int(bool(dead)), host))
    if fail_next_moves is not None:
        conn.execute("UPDATE host_faults SET fail_next_moves = ? WHERE host = ?",
                     (max(0, int(fail_next_moves)), host))


def take_move_fault(conn, host: str) -> bool:
    """Whether the move to ``host`` finishing now fails (consumes one of fail_next_moves)."""
    return bool(conn.execute(
        "UPDATE host_faults SET fail_next_moves = fail_next_moves - 1 "
        "WHERE host = ? AND fail_next_moves > 0", (host,)).rowcount)


def server_faults(conn, uuid: str) -> dict:
    row = conn.execute("SELECT fail_move, live_migratable FROM server_faults WHERE uuid = ?",
                       (uuid,)).fetchone()
    if row is None:
        return {"uuid": uuid, "fail_move": False, "live_migratable": True}
    return {"uuid": uuid, "fail_move": bool(row[0]), "live_migratable": bool(row[1])}


def set_server_faults(conn, uuid: str, fail_move: bool | None = None,
                      live_migratable: bool | None = None) -> dict:
    """Change a server's faults (arguments left None keep their value)."""
    conn.execute("INSERT OR IGNORE INTO server_faults (uuid) VALUES (?)", (uuid,))
    if fail_move is not None:
        conn.execute("UPDATE server_faults SET fail_move = ? WHERE uuid = ?",
                     (int(bool(fail_move)), uuid))
    if live_migratable is not None:
        conn.execute("UPDATE server_faults SET live_migratable = ? WHERE uuid = ?",
                     (int(bool(live_migratable)), uuid))
    return server_faults(conn, uuid)


class FaultCalls:
    """The fault calls of ``FakeDriver``, and the liveness check every call makes.

    Uses the driver's ``store``, ``_faults`` (a FaultBook), ``_revived`` (a
    Condition notified when a host comes back or the driver closes),
    ``_closed``, ``_inventories`` and ``_inventory``.
    """

    def _host_died(self, conn, host: str) -> None:
        """What else dies with ``host``, in the transaction that marks it dead."""

    def set_faults(self, host: str, fail_next: int | None = None,
                   fail_fraction: float | None = None, seed: int | None = None,
                   dead: bool | None = None, hang_seconds: float | None = None,
                   fail_next_moves: int | None = None) -> dict:
        """Change a host's faults (arguments left None keep their value).

        ``dead`` and ``fail_next_moves`` are kept in the state file, the
        others in this process. A host coming back does not destroy anything
        by itself: its agent asks the database which copies must go.
        """
        self._inventory(host)
        self._faults.change(host, fail_next=fail_next, fail_fraction=fail_fraction,
                            seed=seed, hang_seconds=hang_seconds)
        if dead is not None or fail_next_moves is not None:
            with self.store.write() as conn:
                set_host_faults(conn, host, dead=dead, fail_next_moves=fail_next_moves)
                if dead:
                    self._host_died(conn, host)
        if dead is False:
            with self._revived:  # calls hanging on the host go through now (late)
                self._revived.notify_all()
        return self.get_faults(host)

    def get_faults(self, host: str) -> dict:
        with self.store.read() as conn:
            shared = host_faults(conn, host)
        return {**self._faults.of(host).public(), **shared}

    def set_server_faults(self, uuid: str, fail_move: bool | None = None,
                          live_migratable: bool | None = None) -> dict:
        """Faults of one server's moves, wherever they run (kept in the state file)."""
        with self.store.write() as conn:
            return set_server_faults(conn, uuid, fail_move=fail_move,
                                     live_migratable=live_migratable)

    def is_dead(self, host: str) -> bool:
        with self.store.read() as conn:
            return is_dead(conn, host)

    def dead_hosts(self) -> set[str]:
        """The served hosts that are dead."""
        with self.store.read() as conn:
            return dead_hosts(conn) & set(self._inventories)

    def _check_alive(self, host: str) -> None:
        self._inventory(host)
        if self.is_dead(host) and not self._hang_until_revived(host):
            raise HostDead(f"host {host} is dead", host=host)

    def _hang_until_revived(self, host: str) -> bool:
        """Whether a call to a dead host goes through after all, having hung for a while.

        A hanging call is a request stuck on its way to an unreachable host: if
        the host comes back in time (and the driver is not closing), the request
        still runs, late, after its caller gave up (what RabbitMQ does with a
        message queued for a host that restarts). Otherwise it fails.
        """
        deadline = time.monotonic() + self._faults.of(host).hang_seconds
        while not self._closed.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._revived:
                self._revived.wait(min(left, REVIVE_POLL_S))
            if not self._closed.is_set() and not self.is_dead(host):
                return True
        return False

    def _take_build_fault(self, host: str) -> str | None:
        return self._faults.take_build_fault(host)
