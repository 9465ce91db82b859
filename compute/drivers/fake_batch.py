"""Many builds, or many destroys, in one write: what a batch costs the simulated hosts.

A boot that takes no time is one write transaction (checks, the guest's row,
the spawn ledger). A batch of them takes the state file's write lock once and
runs each build's write in a savepoint of the same transaction, so one build
refused (stale fence, no capacity) undoes its own writes and none of the
others'. What would wait inside a build (a dead host's hang, a slot for a slow
boot, a boot under way) is left for the caller to run alone. A batch of destroys
is the same: one write for all of them, a dead host's (which may hang) left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from fleetflow.common import states
from fleetflow.common.exceptions import FleetflowError
from fleetflow.compute.drivers import fake_store as store


class BatchCalls:
    """``build_at_once`` for :class:`~fleetflow.compute.drivers.fake.FakeDriver`."""

    def build_at_once(self, builds: Sequence[Mapping]) -> list:
        """One outcome a build of ``builds`` (``build_instance``'s arguments), in order:
        the guest, the exception its build raised, or None where it must run alone."""
        outcomes: list = [None] * len(builds)
        if self.boot_seconds or not builds:
            return outcomes
        dead = self.dead_hosts()
        mine: dict[tuple[str, str], int] = {}
        for index, build in enumerate(builds):
            key = (build["host"], build["uuid"])
            # A second build of the same guest (another owner's) waits for the
            # first, as two calls would: it runs alone.
            if build["host"] in self._inventories and build["host"] not in dead \
                    and key not in mine:
                mine[key] = index
        if not mine:
            return outcomes
        with contextlib.ExitStack() as locks:
            for key in sorted(mine):  # always in the same order: no deadlock
                locks.enter_context(self._guest_lock(*key))
            with self.store.write() as conn:
                for index in mine.values():
                    outcomes[index] = self._spawn_saved(conn, builds[index])
        for index in mine.values():
            guest = outcomes[index]
            if isinstance(guest, dict) and guest["state"] != states.ACTIVE:
                outcomes[index] = None  # a slow boot of it under way: waited for alone
        return outcomes

    def destroy_at_once(self, destroys: Sequence[Mapping]) -> list:
        """One outcome a destroy of ``destroys`` (``destroy_instance``'s arguments), in
        order: what ``destroy_instance`` returns, the exception it raised (a stale
        fence), or None where it must run alone (a dead host's, which may hang)."""
        outcomes: list = [None] * len(destroys)
        dead = self.dead_hosts() if destroys else set()
        mine = [k for k, d in enumerate(destroys)
                if d["host"] in self._inventories and d["host"] not in dead]
        if not mine:
            return outcomes
        refused: dict[tuple, FleetflowError | None] = {}
        with self.store.write() as conn:
            for k in mine:
                host, uuid, fence = destroys[k]["host"], destroys[k]["uuid"], \
                    destroys[k].get("fence")
                key = (fence or {}).get("key"), (fence or {}).get("token")
                if key not in refused:  # a batch's destroys share their job's fence
                    try:
                        store.check_fence(conn, fence)
                        refused[key] = None
                    except FleetflowError as exc:
                        refused[key] = exc
                if refused[key] is not None:
                    outcomes[k] = refused[key]
                    continue
                removed = store.delete_guest(conn, host, uuid)
                outcomes[k] = {"uuid": uuid, "host": host, "destroyed": bool(removed)}
            self._release_volumes(conn, [destroys[k]["uuid"] for k in mine
                                         if isinstance(outcomes[k], dict)])
        return outcomes

    def _spawn_saved(self, conn, build: Mapping):
        conn.execute("SAVEPOINT build")
        try:
            guest, failure = self._spawn_in(conn, build["host"], build["uuid"],
                                            build["resources"], build.get("image"),
                                            build.get("fence"), "builds")
        except Exception as exc:  # noqa: BLE001 - this build's answer, not the batch's
            conn.execute("ROLLBACK TO build")
            conn.execute("RELEASE build")
            return exc
        conn.execute("RELEASE build")
        return failure if failure is not None else guest
