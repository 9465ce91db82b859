"""A stateful fake hypervisor shared by every simulated host of a process.

What it promises, so flows can be tested against something that behaves like a
host and not like a mock:

- guests keyed by instance uuid per host, kept in a SQLite file of their own
  (``fake_store``), so they survive ``kill -9`` of the process that served them;
- every operation is idempotent: building an existing uuid returns it and does
  not spawn again (``spawn_count`` counts effective spawns), destroying a
  missing guest is fine, moves / attach / detach converge;
- builds never exceed the host's real capacity (a scheduler bug fails loudly),
  take ``boot_seconds`` and run at most ``max_concurrent_builds`` at once per
  host (as Nova's option; builds beyond it wait);
- a boot is started by one write, which sets when it ends (``ready_at``) and
  counts the spawn; nothing is written when it ends, the guest reads ACTIVE from
  then on. A spawn thus counts when its boot starts: a guest destroyed, or a
  process killed, mid-boot still counts one, and a boot outlives the process
  that started it (a later build of the uuid waits for it, never boots it again);
- moves between hosts (rebuild, live, cold) are persisted records with a
  duration, started by one call and polled (``fake_moves``), at most one
  effective move per migration id and destination;
- faults per host: fail the next N builds, fail a seeded fraction, fail the
  next N moves, go dead (persisted: every process sharing the file sees it,
  and none revives a host by starting); per server: fail its moves, refuse
  live migration;
- block storage volumes on host-local or rack-shared backends, attached only
  where reachable and to one instance at a time (``fake_storage``);
- fencing: mutating operations carry ``fence={"key", "token"}`` and an older
  token than the newest seen for the key is refused with StaleFence. Which
  copies a host that comes back must destroy is the database's call
  (``destroy_copies``), not this file's.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping

from fleetflow.common import config, states
from fleetflow.compute import moves as mv
from fleetflow.compute.drivers import fake_backends as backends
from fleetflow.compute.drivers import fake_batch as batch
from fleetflow.compute.drivers import fake_capacity
from fleetflow.compute.drivers import fake_faults as faults
from fleetflow.compute.drivers import fake_moves as moves
from fleetflow.compute.drivers import fake_storage as storage
from fleetflow.compute.drivers import fake_store as store
from fleetflow.compute.drivers.fake_move_calls import MoveCalls
from fleetflow.compute.exceptions import BuildFailed, HostNotServed, InstanceNotFound


# MoveCalls before FaultCalls: the ``_host_died`` that FaultCalls calls when a
# host dies must be MoveCalls' (fail its moves), not FaultCalls' empty default.
class FakeDriver(MoveCalls, faults.FaultCalls, storage.StorageCalls, batch.BatchCalls):
    """The simulated hypervisor of every host a process serves."""

    def __init__(self, state_path: str, boot_seconds: float = 0.0,
                 max_concurrent_builds: int = 10, migrate_seconds: float = 0.0,
                 live_migrate_seconds: float = 0.0, max_outgoing_migrations: int = 4,
                 max_incoming_migrations: int = 4):
        self.state_path = state_path
        self.boot_seconds = boot_seconds
        self.max_concurrent_builds = max_concurrent_builds
        self.move_rules = moves.MoveRules(
            live_seconds=live_migrate_seconds, migrate_seconds=migrate_seconds,
            max_outgoing=max_outgoing_migrations, max_incoming=max_incoming_migrations)
        self.store = store.GuestStore(state_path)
        self._inventories: dict[str, Mapping] = {}
        self._faults = faults.FaultBook()
        self._storage = backends.StorageBook()
        self._revived = threading.Condition()
        self._semaphores: dict[str, threading.BoundedSemaphore] = {}
        self._building: dict[str, int] = {}
        self._peak: dict[str, int] = {}
        self._guest_locks: dict[tuple[str, str], list] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @classmethod
    def from_conf(cls, conf) -> FakeDriver:
        compute = conf.compute
        return cls(config.state_path(conf, compute.state_path),
                   boot_seconds=compute.boot_seconds,
                   max_concurrent_builds=compute.max_concurrent_builds,
                   migrate_seconds=compute.migrate_seconds,
                   live_migrate_seconds=compute.live_migrate_seconds,
                   max_outgoing_migrations=compute.max_concurrent_outgoing_migrations,
                   max_incoming_migrations=compute.max_concurrent_incoming_migrations)

    # -- hosts -------------------------------------------------------------

    def add_hosts(self, inventories: Mapping[str, Mapping]) -> None:
        """Serve these hosts: ``{name: {"VCPU": {"total", "allocation_ratio", "reserved"}}}``."""
        with self._lock:
            self._inventories.update({name: dict(inv) for name, inv in inventories.items()})

    @property
    def hosts(self) -> list[str]:
        return sorted(self._inventories)

    def _inventory(self, host: str) -> Mapping:
        try:
            return self._inventories[host]
        except KeyError:
            raise HostNotServed(f"host {host} is not served here", host=host) from None

    def capacity(self, host: str) -> dict[str, float]:
        return fake_capacity.capacity(self._inventory(host))

    def usage(self, host: str) -> dict[str, int]:
        with self.store.read() as conn:
            return fake_capacity.usage(conn, host)

    # -- serialisation and the build slots ---------------------------------

    @contextlib.contextmanager
    def _guest_lock(self, host: str, uuid: str) -> Iterator[None]:
        """One operation at a time per guest in this process (duplicates wait, then converge)."""
        key = (host, uuid)
        with self._lock:
            entry = self._guest_locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._guest_locks[key]

    def _take_build_slot(self, host: str, wait: bool = True) -> bool:
        """One of ``host``'s build slots; False, holding none, if none is free and not ``wait``."""
        with self._lock:
            sem = self._semaphores.get(host)
            if sem is None:
                sem = self._semaphores[host] = threading.BoundedSemaphore(
                    self.max_concurrent_builds)
        if not sem.acquire(blocking=wait):
            return False
        with self._lock:
            self._building[host] = self._building.get(host, 0) + 1
            self._peak[host] = max(self._peak.get(host, 0), self._building[host])
        return True

    def _give_back_build_slot(self, host: str) -> None:
        with self._lock:
            self._building[host] -= 1
        self._semaphores[host].release()

    def peak_concurrent_builds(self, host: str) -> int:
        """Most builds this process ran at once on ``host`` (the limit must hold)."""
        return self._peak.get(host, 0)

    # -- operations ------------------------------------------------------

    def build_instance(self, host: str, uuid: str, resources: Mapping,
                       image: str | None = None, fence: Mapping | None = None) -> dict:
        """Spawn ``uuid`` on ``host``, or return it when it is already there."""
        self._check_alive(host)
        with self._guest_lock(host, uuid):
            return self._spawn(host, uuid, resources, image, fence, "builds")

    def _spawn(self, host: str, uuid: str, resources: Mapping, image: str | None,
               fence: Mapping | None, ledger: str) -> dict:
        """Boot ``uuid``, or wait for the boot of it already under way.

        With a build slot free, the write that creates the guest also starts
        its boot; otherwise the guest waits BUILDING for a slot (holding its
        capacity) and a second write starts the boot. Nothing is written when
        the boot ends. A build that will fail never starts a boot.
        """
        if not self.boot_seconds:
            return self._spawn_at_once(host, uuid, resources, image, fence, ledger)
        holding = self._take_build_slot(host, wait=False)
        try:
            with self.store.write() as conn:
                guest = store.guest_before_spawn(conn, host, uuid, self._inventory(host),
                                                 resources, fence)
                ours = guest is None or store.unbooted(guest)
                failure = self._take_build_fault(host) if ours else None
                if guest is None:
                    store.insert_guest(conn, host, uuid, states.BUILDING, image, resources)
                # else, if ours: a crash came before its boot started: boot it now.
                boot_ends = (self._start_boot(conn, host, uuid, ledger)
                             if ours and holding and failure is None else None)
            if ours and boot_ends is None:
                holding = holding or self._take_build_slot(host)
                if failure:
                    self._closed.wait(self.boot_seconds)
                    # A failed spawn leaves nothing behind (deleted, committed, then raised).
                    with self.store.write() as conn:
                        store.delete_guest(conn, host, uuid, unbooted_only=True)
                    raise BuildFailed(f"{uuid} on {host}: {failure}", host=host, uuid=uuid)
                with self.store.write() as conn:
                    boot_ends = self._start_boot(conn, host, uuid, ledger)
                    guest = store.load_guest(conn, host, uuid)
            if boot_ends is not None:
                return self._await_boot(host, uuid, boot_ends)
            if holding:  # booted, or booting elsewhere: wait without a slot
                self._give_back_build_slot(host)
                holding = False
            return self._await_boot(host, uuid, guest and guest["ready_at"])
        finally:
            if holding:
                self._give_back_build_slot(host)

    def _start_boot(self, conn, host: str, uuid: str, ledger: str) -> float | None:
        """When the boot started for an unbooted guest ends; None if it was not ours to start."""
        ready_at = time.time() + self.boot_seconds
        return ready_at if store.start_boot(conn, host, uuid, ready_at, ledger) else None

    def _await_boot(self, host: str, uuid: str, ready_at: float | None) -> dict:
        """The guest once its boot ended (a shutdown ends a boot still under way now)."""
        if ready_at is not None:
            while (left := ready_at - time.time()) > 0 and not self._closed.wait(left):
                pass
            if time.time() < ready_at:
                with self.store.write() as conn:
                    store.end_boot_now(conn, host, uuid)
        with self.store.read() as conn:
            guest = store.load_guest(conn, host, uuid)
        if guest is None:
            raise BuildFailed(f"{uuid} on {host} was destroyed while it was building",
                              host=host, uuid=uuid)
        return guest

    def _spawn_at_once(self, host: str, uuid: str, resources: Mapping, image: str | None,
                       fence: Mapping | None, ledger: str) -> dict:
        """A boot that takes no time: the guest is ACTIVE in the transaction that creates it.

        Same checks, fault draw and ledger as the slow path, in one write, a
        failed one included; a slow boot already under way (from a driver with
        ``boot_seconds`` on the same file) is waited for.
        """
        with self.store.write() as conn:
            guest, failure = self._spawn_in(conn, host, uuid, resources, image, fence, ledger)
        if failure:
            raise failure
        if guest["state"] == states.ACTIVE:
            return guest
        return self._await_boot(host, uuid, guest["ready_at"])

    def _spawn_in(self, conn, host: str, uuid: str, resources: Mapping, image: str | None,
                  fence: Mapping | None, ledger: str) -> tuple[dict | None, Exception | None]:
        """The write of a boot that takes no time, inside the caller's transaction.

        (guest, None): the guest, ACTIVE unless a slow boot of it is under way;
        (None, BuildFailed): the injected failure, to raise once the write that
        removed what the spawn left behind is committed.
        """
        guest = store.guest_before_spawn(conn, host, uuid, self._inventory(host),
                                         resources, fence)
        if guest is not None and not store.unbooted(guest):
            return guest, None
        failure = self._take_build_fault(host)
        if failure is not None:
            # A failed spawn leaves nothing behind, as on the slow path.
            store.delete_guest(conn, host, uuid, unbooted_only=True)
            return None, BuildFailed(f"{uuid} on {host}: {failure}", host=host, uuid=uuid)
        if guest is None:
            store.insert_guest(conn, host, uuid, states.ACTIVE, image, resources)
        else:  # a crash came before its boot started: finish it
            store.update_guest(conn, host, uuid, unbooted_only=True, state=states.ACTIVE)
        store.count_spawn(conn, host, uuid, ledger)
        return store.load_guest(conn, host, uuid), None

    def destroy_instance(self, host: str, uuid: str, fence: Mapping | None = None) -> dict:
        """Remove ``uuid`` from ``host``; a missing guest is already destroyed."""
        self._check_alive(host)
        with self.store.write() as conn:
            store.check_fence(conn, fence)
            removed = store.delete_guest(conn, host, uuid)
            self._release_volumes(conn, [uuid])
        return {"uuid": uuid, "host": host, "destroyed": bool(removed)}

    def destroy_copies(self, host: str, uuids: list[str]) -> list[str]:
        """Destroy these guests of ``host`` (copies rebuilt elsewhere while it was dead).

        An incoming copy of a move to ``host`` is not one of them: the server
        may be moving back here.
        """
        self._check_alive(host)
        if not uuids:
            return []
        with self.store.write() as conn:
            gone = store.delete_guests(conn, host, list(uuids), keep_state=mv.MIGRATING)
            self._release_volumes(conn, gone)
            return gone

    def attach_volume(self, host: str, uuid: str, volume_id: str,
                      fence: Mapping | None = None) -> dict:
        return self._change_volumes(host, uuid, volume_id, fence, attach=True)

    def detach_volume(self, host: str, uuid: str, volume_id: str,
                      fence: Mapping | None = None) -> dict:
        return self._change_volumes(host, uuid, volume_id, fence, attach=False)

    def _change_volumes(self, host, uuid, volume_id, fence, attach: bool) -> dict:
        self._check_alive(host)
        with self._guest_lock(host, uuid), self.store.write() as conn:
            store.check_fence(conn, fence)
            guest = store.load_guest(conn, host, uuid)
            if guest is None:
                if attach:
                    raise InstanceNotFound(f"{uuid} is not on {host}", host=host, uuid=uuid)
                self._release_volumes(conn, [uuid])
                return {"uuid": uuid, "host": host, "volumes": []}
            if attach:
                self._claim_volume(conn, host, uuid, volume_id)
            volumes = [v for v in guest["volumes"] if v != volume_id]
            if attach:
                volumes.append(volume_id)
            if volumes != guest["volumes"]:
                store.update_guest(conn, host, uuid, volumes=volumes)
            if not attach:
                self._release_volumes(conn, [uuid])
            return store.load_guest(conn, host, uuid)

    # -- reads -------------------------------------------------------------

    def get_instance(self, host: str, uuid: str) -> dict | None:
        self._check_alive(host)
        with self.store.read() as conn:
            return store.load_guest(conn, host, uuid)

    def list_instances(self, host: str) -> list[dict]:
        self._check_alive(host)
        with self.store.read() as conn:
            return store.load_guests(conn, host)

    def ping(self, host: str) -> dict:
        self._check_alive(host)
        # A simulation: a real driver's answer would say False.
        return {"host": host, "alive": True, "time": time.time(), "simulated": True}

    def spawn_count(self, uuid: str, host: str | None = None, ledger: str = "builds") -> int:
        """Effective builds (or ``rebuilds``) of ``uuid`` (on ``host``, or on every host),
        destroyed or not."""
        with self.store.read() as conn:
            return store.spawn_count(conn, uuid, host, ledger)

    def interrupt(self) -> None:
        """Shutting down: calls hanging on dead hosts fail, sleeping boots end now."""
        self._closed.set()
        with self._revived:
            self._revived.notify_all()

    def close(self) -> None:
        """Interrupt, then close the state file (after the callers are gone)."""
        self.interrupt()
        self.store.close()
