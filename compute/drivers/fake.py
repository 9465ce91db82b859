"""A stateful fake hypervisor shared by every simulated host of a process.

What it promises, so flows can be tested against something that behaves like a
host and not like a mock:

- guests keyed by instance uuid per host, kept in a SQLite file of their own
  (``fake_store``), so they survive ``kill -9`` of the process that served them;
- every operation is idempotent: building an existing uuid returns it and does
  not spawn again (``spawn_count`` counts effective spawns), destroying a
  missing guest is fine, rebuild / migrate / attach / detach converge;
- builds never exceed the host's real capacity (a scheduler bug fails loudly),
  take ``boot_seconds`` and run at most ``max_concurrent_builds`` at once per
  host (as Nova's option; builds beyond it wait);
- a boot is started by one write, which sets when it ends (``ready_at``) and
  counts the spawn; nothing is written when it ends, the guest reads ACTIVE from
  then on. A spawn thus counts when its boot starts: a guest destroyed, or a
  process killed, mid-boot still counts one, and a boot outlives the process
  that started it (a later build of the uuid waits for it, never boots it again);
- faults per host: fail the next N builds, fail a seeded fraction, go dead;
- fencing: mutating operations carry ``fence={"key", "token"}`` and an older
  token than the newest seen for the key is refused with StaleFence; copies of
  instances evacuated off a fenced host are destroyed when it comes back.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping

from fleetflow.common import config, states
from fleetflow.compute.drivers import fake_store as store
from fleetflow.compute.drivers.fake_faults import FaultBook
from fleetflow.compute.exceptions import BuildFailed, HostDead, HostNotServed, InstanceNotFound


class FakeDriver:
    """The simulated hypervisor of every host a process serves."""

    def __init__(self, state_path: str, boot_seconds: float = 0.0,
                 max_concurrent_builds: int = 10):
        self.state_path = state_path
        self.boot_seconds = boot_seconds
        self.max_concurrent_builds = max_concurrent_builds
        self.store = store.GuestStore(state_path)
        self._inventories: dict[str, Mapping] = {}
        self._faults = FaultBook()
        self._semaphores: dict[str, threading.BoundedSemaphore] = {}
        self._building: dict[str, int] = {}
        self._peak: dict[str, int] = {}
        self._guest_locks: dict[tuple[str, str], list] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @classmethod
    def from_conf(cls, conf) -> FakeDriver:
        return cls(config.state_path(conf, conf.compute.state_path),
                   boot_seconds=conf.compute.boot_seconds,
                   max_concurrent_builds=conf.compute.max_concurrent_builds)

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
        return store.capacity(self._inventory(host))

    def usage(self, host: str) -> dict[str, int]:
        with self.store.read() as conn:
            return store.usage(conn, host)

    # -- faults ------------------------------------------------------------

    def set_faults(self, host: str, **faults) -> dict:
        """Change a host's faults (``fake_faults.FaultBook.change``'s arguments)."""
        self._inventory(host)
        public = self._faults.change(host, **faults)
        if faults.get("dead") is False:
            # A host coming back first destroys what was evacuated off it.
            self.cleanup_evacuated(host)
        return public

    def get_faults(self, host: str) -> dict:
        return self._faults.of(host).public()

    def _check_alive(self, host: str) -> None:
        self._inventory(host)
        if not self._faults.is_reachable(host, self._closed):
            raise HostDead(f"host {host} is dead", host=host)

    def _take_build_fault(self, host: str) -> str | None:
        return self._faults.take_build_fault(host)

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

    def rebuild_instance(self, host: str, uuid: str, resources: Mapping | None = None,
                         image: str | None = None, source_host: str | None = None,
                         fence: Mapping | None = None) -> dict:
        """Re-image ``uuid`` on ``host``, or (with ``source_host``) rebuild it here after an
        evacuation: the copy on the fenced source is destroyed when that host comes back."""
        self._check_alive(host)
        with self._guest_lock(host, uuid):
            with self.store.write() as conn:
                store.apply_evacuations(conn, host)
                store.check_fence(conn, fence)
                if source_host and source_host != host:
                    store.record_evacuation(conn, source_host, uuid)
                guest = store.load_guest(conn, host, uuid)
                if guest is not None and guest["state"] == states.ACTIVE:
                    if source_host or image is None or image == guest["image"]:
                        return guest  # already rebuilt with this image: nothing to do
                    store.update_guest(conn, host, uuid, image=image)
                    store.count_spawn(conn, host, uuid, "rebuilds")
                    return store.load_guest(conn, host, uuid)
            if resources is None:
                raise InstanceNotFound(f"{uuid} is not on {host}; rebuilding it here needs "
                                       "its resources", host=host, uuid=uuid)
            return self._spawn(host, uuid, resources, image, fence, "rebuilds")

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
            guest = store.guest_before_spawn(conn, host, uuid, self._inventory(host),
                                             resources, fence)
            failure = None
            if guest is None or store.unbooted(guest):
                failure = self._take_build_fault(host)
                if failure is not None:
                    # A failed spawn leaves nothing behind, as on the slow path.
                    store.delete_guest(conn, host, uuid, unbooted_only=True)
                else:
                    if guest is None:
                        store.insert_guest(conn, host, uuid, states.ACTIVE, image, resources)
                    else:  # a crash came before its boot started: finish it
                        store.update_guest(conn, host, uuid, unbooted_only=True,
                                           state=states.ACTIVE)
                    store.count_spawn(conn, host, uuid, ledger)
                    guest = store.load_guest(conn, host, uuid)
        if failure:
            raise BuildFailed(f"{uuid} on {host}: {failure}", host=host, uuid=uuid)
        if guest["state"] == states.ACTIVE:
            return guest
        return self._await_boot(host, uuid, guest["ready_at"])

    def destroy_instance(self, host: str, uuid: str, fence: Mapping | None = None) -> dict:
        """Remove ``uuid`` from ``host``; a missing guest is already destroyed."""
        self._check_alive(host)
        with self.store.write() as conn:
            store.apply_evacuations(conn, host)
            store.check_fence(conn, fence)
            removed = store.delete_guest(conn, host, uuid)
        return {"uuid": uuid, "host": host, "destroyed": bool(removed)}

    def migrate_instance(self, host: str, uuid: str, source_host: str,
                         resources: Mapping | None = None,
                         fence: Mapping | None = None) -> dict:
        """Make ``uuid`` run on ``host`` (the destination) instead of ``source_host``.

        When the source's guest is in this store it moves in the same
        transaction; otherwise the caller destroys the source copy (destroy is
        idempotent, so callers may always do so).
        """
        self._check_alive(host)
        inventory = self._inventory(host)
        with self._guest_lock(host, uuid), self.store.write() as conn:
            store.apply_evacuations(conn, host)
            store.check_fence(conn, fence)
            guest = store.load_guest(conn, host, uuid)
            if guest is not None:
                return guest
            source = store.load_guest(conn, source_host, uuid)
            if resources is None:
                if source is None:
                    raise InstanceNotFound(f"{uuid} is on neither {source_host} nor {host}",
                                           host=source_host, uuid=uuid)
                resources = source["resources"]
            store.check_capacity(conn, host, inventory, resources)
            store.insert_guest(conn, host, uuid, states.ACTIVE,
                               source["image"] if source else None, resources,
                               volumes=source["volumes"] if source else [],
                               migrated_from=source_host)
            store.delete_guest(conn, source_host, uuid)
            return store.load_guest(conn, host, uuid)

    def attach_volume(self, host: str, uuid: str, volume_id: str,
                      fence: Mapping | None = None) -> dict:
        return self._change_volumes(host, uuid, volume_id, fence, attach=True)

    def detach_volume(self, host: str, uuid: str, volume_id: str,
                      fence: Mapping | None = None) -> dict:
        return self._change_volumes(host, uuid, volume_id, fence, attach=False)

    def _change_volumes(self, host, uuid, volume_id, fence, attach: bool) -> dict:
        self._check_alive(host)
        with self._guest_lock(host, uuid), self.store.write() as conn:
            store.apply_evacuations(conn, host)
            store.check_fence(conn, fence)
            guest = store.load_guest(conn, host, uuid)
            if guest is None:
                if attach:
                    raise InstanceNotFound(f"{uuid} is not on {host}", host=host, uuid=uuid)
                return {"uuid": uuid, "host": host, "volumes": []}
            volumes = [v for v in guest["volumes"] if v != volume_id]
            if attach:
                volumes.append(volume_id)
            if volumes != guest["volumes"]:
                store.update_guest(conn, host, uuid, volumes=volumes)
            return store.load_guest(conn, host, uuid)

    def fence_instance(self, host: str, uuid: str) -> None:
        """Mark ``host``'s copy of ``uuid`` for destruction when the host comes back.

        Works while the host is dead: the mark is in the shared state file, and
        the host applies it before anything else it does.
        """
        self._inventory(host)
        with self.store.write() as conn:
            store.record_evacuation(conn, host, uuid)

    def cleanup_evacuated(self, host: str) -> list[str]:
        """Destroy ``host``'s evacuated copies now (host revived)."""
        with self.store.write() as conn:
            return store.apply_evacuations(conn, host)

    def cleanup_all_evacuated(self) -> dict[str, list[str]]:
        """Destroy the evacuated copies of every served host (agent start)."""
        with self.store.write() as conn:
            return store.apply_all_evacuations(conn, set(self._inventories))

    # -- reads -------------------------------------------------------------

    @contextlib.contextmanager
    def _read(self, host: str) -> Iterator:
        """A connection to read ``host``'s guests, its pending evacuations applied first."""
        self._check_alive(host)
        with self.store.read() as conn:
            pending = store.has_evacuations(conn, host)
        if pending:
            self.cleanup_evacuated(host)
        with self.store.read() as conn:
            yield conn

    def get_instance(self, host: str, uuid: str) -> dict | None:
        with self._read(host) as conn:
            return store.load_guest(conn, host, uuid)

    def list_instances(self, host: str) -> list[dict]:
        with self._read(host) as conn:
            return store.load_guests(conn, host)

    def ping(self, host: str) -> dict:
        self._check_alive(host)
        return {"host": host, "alive": True, "time": time.time()}

    def spawn_count(self, uuid: str, host: str | None = None) -> int:
        """Effective builds of ``uuid`` (on ``host``, or on every host), destroyed or not."""
        with self.store.read() as conn:
            return store.spawn_count(conn, uuid, host)

    def interrupt(self) -> None:
        """Shutting down: calls hanging on dead hosts fail, sleeping boots end now."""
        self._closed.set()
        self._faults.release_hanging()

    def close(self) -> None:
        """Interrupt, then close the state file (after the callers are gone)."""
        self.interrupt()
        self.store.close()
