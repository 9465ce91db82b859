"""Block storage of the simulated fleet: volumes on storage backends.

A backend is either one host's own disk or shared by the hosts of one rack
(``fake_backends`` says which hosts reach it). A volume may only be attached
where its backend is reachable, and to one instance at a time; an attached
volume cannot be deleted (a forced detach frees it when its guest's host is dead).
Those are the rules a virtual cluster's placement must respect, so the
simulation refuses what a real cloud would refuse.

Like guests, volumes live in the state file (``fake_store``): they outlive
the process that created them, and every process sharing the file sees them.
What a driver serves (backends, the hosts' topology: ``fake_backends``) is
held in memory, as the hosts' inventories are: each agent learns it when it starts.

- ``volumes``: one row per volume id, kept after a delete (status
  ``deleted``), so a late duplicate of a delete is still a no-op and a stale
  attach of a deleted volume is refused rather than resurrecting it.
- ``volume_creates``: effective creates per volume id, never decremented, so a
  test can prove a volume was created at most once (the volumes' spawn ledger).
- ``backend_faults``: creates to fail per backend. In the file, not in memory:
  whichever process serves the next create must see them.

Every create is checked and written in one write transaction (fence,
idempotence, type, capacity, fault), so two processes creating the same id
make one volume, and two creates never overcommit a backend between them.
Volume ids that the table does not know are attached as before (older flows
attach volumes they never created here).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from fleetflow.common.exceptions import InvalidInput
from fleetflow.compute.drivers import fake_store as store
from fleetflow.compute.drivers.fake_backends import Backend
from fleetflow.compute.exceptions import (
    CapacityExceeded,
    VolumeCreateFailed,
    VolumeInUse,
    VolumeMismatch,
    VolumeNotFound,
    VolumeTypeUnsupported,
)

AVAILABLE = "available"
IN_USE = "in-use"
DELETED = "deleted"

VOLUME_SELECT = """
SELECT v.*, COALESCE(c.creates, 0) AS creates FROM volumes v
LEFT JOIN volume_creates c ON c.volume_id = v.volume_id
"""

# Attachments per statement when releasing many instances' volumes at once.
RELEASE_CHUNK = 500


# -- the state file ---------------------------------------------------------


def volume_dict(row) -> dict:
    return {"volume_id": row["volume_id"], "backend": row["backend"],
            "size_gb": row["size_gb"], "volume_type": row["volume_type"],
            "status": row["status"], "attached_to": row["attached_to"],
            "attached_host": row["attached_host"], "created_at": row["created_at"],
            "updated_at": row["updated_at"], "create_count": row["creates"]}


def load(conn, volume_id: str):
    return conn.execute(VOLUME_SELECT + " WHERE v.volume_id = ?", (volume_id,)).fetchone()


def load_all(conn, backend: str, include_deleted: bool = False) -> list[dict]:
    where = " WHERE v.backend = ?" + ("" if include_deleted else f" AND v.status != '{DELETED}'")
    rows = conn.execute(VOLUME_SELECT + where + " ORDER BY v.created_at, v.volume_id",
                        (backend,))
    return [volume_dict(row) for row in rows]


def used_gb(conn, backend: str) -> int:
    row = conn.execute("SELECT SUM(size_gb) FROM volumes WHERE backend = ? AND status != ?",
                       (backend, DELETED)).fetchone()
    return int(row[0] or 0)


def create_count(conn, volume_id: str) -> int:
    row = conn.execute("SELECT creates FROM volume_creates WHERE volume_id = ?",
                       (volume_id,)).fetchone()
    return int(row[0]) if row else 0


def backend_faults(conn, backend: str) -> dict:
    row = conn.execute("SELECT fail_next_creates FROM backend_faults WHERE backend = ?",
                       (backend,)).fetchone()
    return {"backend": backend, "fail_next_creates": int(row[0]) if row else 0}


def set_backend_faults(conn, backend: str, fail_next_creates: int | None = None) -> dict:
    """Change a backend's faults (arguments left None keep their value)."""
    if fail_next_creates is not None:
        conn.execute(
            "INSERT INTO backend_faults (backend, fail_next_creates) VALUES (?, ?) "
            "ON CONFLICT (backend) DO UPDATE SET fail_next_creates = excluded.fail_next_creates",
            (backend, max(0, int(fail_next_creates))))
    return backend_faults(conn, backend)


def take_create_fault(conn, backend: str) -> bool:
    """Whether this create fails (consumes one of fail_next_creates)."""
    return bool(conn.execute(
        "UPDATE backend_faults SET fail_next_creates = fail_next_creates - 1 "
        "WHERE backend = ? AND fail_next_creates > 0", (backend,)).rowcount)


def check_same(row, backend: Backend, size_gb: int, volume_type: str | None) -> None:
    """A create repeated for a live volume must ask for the volume that exists."""
    wanted = (backend.name, size_gb)
    if (row["backend"], row["size_gb"]) != wanted or (
            volume_type is not None and volume_type != row["volume_type"]):
        raise VolumeMismatch(
            f"volume {row['volume_id']} exists on {row['backend']} ({row['size_gb']} GB, "
            f"type {row['volume_type']}); asked for {backend.name} ({size_gb} GB, type "
            f"{volume_type})", volume_id=row["volume_id"], backend=row["backend"],
            size_gb=row["size_gb"], volume_type=row["volume_type"])


def check_room(conn, backend: Backend, size_gb: int) -> None:
    used = used_gb(conn, backend.name)
    if used + size_gb > backend.capacity_gb:
        raise CapacityExceeded(
            f"storage backend {backend.name}: {used} GB used + {size_gb} GB requested "
            f"exceeds capacity {backend.capacity_gb} GB", backend=backend.name,
            resource_class="DISK_GB", used=used, requested=size_gb,
            capacity=backend.capacity_gb)


def insert(conn, volume_id: str, backend: str, size_gb: int, volume_type: str | None,
           now: float) -> None:
    """Write a new volume, replacing a deleted one of the same id, and count the create."""
    conn.execute(
        "INSERT OR REPLACE INTO volumes (volume_id, backend, size_gb, volume_type, status,"
        " attached_to, attached_host, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, ?)",
        (volume_id, backend, size_gb, volume_type, AVAILABLE, now, now))
    conn.execute(
        "INSERT INTO volume_creates (volume_id, creates) VALUES (?, 1) "
        "ON CONFLICT (volume_id) DO UPDATE SET creates = creates + 1", (volume_id,))


def set_status(conn, volume_id: str, status: str, attached_to: str | None = None,
               attached_host: str | None = None) -> None:
    conn.execute("UPDATE volumes SET status = ?, attached_to = ?, attached_host = ?, "
                 "updated_at = ? WHERE volume_id = ?",
                 (status, attached_to, attached_host, time.time(), volume_id))


def release(conn, uuids: Iterable[str]) -> int:
    """Mark available the volumes of these instances that no copy of them lists any more.

    Asked of the guests rather than of the call: after a move an instance
    may have a copy on two hosts, and a volume stays in use while either
    still has it attached.
    """
    uuids = list(dict.fromkeys(uuids))
    released = 0
    for start in range(0, len(uuids), RELEASE_CHUNK):
        part = uuids[start:start + RELEASE_CHUNK]
        marks = ", ".join("?" * len(part))
        released += conn.execute(
            f"UPDATE volumes SET status = ?, attached_to = NULL, attached_host = NULL, "
            f"updated_at = ? WHERE status = ? AND attached_to IN ({marks}) AND NOT EXISTS ("
            f"SELECT 1 FROM guests g, json_each(g.volumes) j "
            f"WHERE g.uuid = volumes.attached_to AND j.value = volumes.volume_id)",
            [AVAILABLE, time.time(), IN_USE, *part]).rowcount
    return released


class StorageCalls:
    """The storage calls of ``FakeDriver``.

    Uses the driver's ``store``, ``_storage`` (a ``fake_backends.StorageBook``),
    ``_inventory`` and ``_check_alive``. Every storage call may name the ``host`` it came
    through (the agent's RPC routing): that host must be served, alive and
    reach the backend, as a real host would have to in order to talk to it.
    """

    # -- what is served ------------------------------------------------------

    def add_backends(self, backends: Mapping[str, Mapping]) -> None:
        """Serve these storage backends: ``{name: {"scope", "host_name", "region",
        "zone", "rack", "capacity_gb", "volume_types"}}``."""
        self._storage.add_backends(backends)

    def add_host_topology(self, topology: Mapping[str, Mapping]) -> None:
        """Where hosts stand: ``{host: {"region", "zone", "rack"}}`` (rack backends' reach)."""
        self._storage.add_topology(topology)

    @property
    def backends(self) -> list[str]:
        return sorted(self._storage.backends)

    def get_backend(self, backend: str) -> dict:
        return self._storage.backend(backend).public()

    def _served_backend(self, backend: str, host: str | None) -> Backend:
        served = self._storage.backend(backend)
        if host is not None:
            self._check_alive(host)
            self._storage.check_reach(served, host)
        return served

    # -- volumes -------------------------------------------------------------

    def create_volume(self, backend: str, volume_id: str, size_gb: int,
                      volume_type: str | None = None, fence: Mapping | None = None,
                      host: str | None = None) -> dict:
        """Create ``volume_id`` on ``backend``, or return it when it exists already.

        A live volume of this id on another backend, or of another size (or
        type, when one is asked for), is refused with VolumeMismatch; a deleted
        one is created anew. A create that fails (injected) writes no volume.
        """
        served = self._served_backend(backend, host)
        size_gb = int(size_gb)
        if size_gb <= 0:
            raise InvalidInput(f"volume {volume_id}: size_gb must be positive, not {size_gb}",
                               volume_id=volume_id, size_gb=size_gb)
        with self.store.write() as conn:
            store.check_fence(conn, fence)
            row = load(conn, volume_id)
            if row is not None and row["status"] != DELETED:
                check_same(row, served, size_gb, volume_type)
                return volume_dict(row)
            if volume_type is not None and volume_type not in served.volume_types:
                raise VolumeTypeUnsupported(
                    f"storage backend {backend} has no volume type {volume_type!r} "
                    f"(it has {', '.join(served.volume_types) or 'none'})", backend=backend,
                    volume_type=volume_type, volume_types=list(served.volume_types))
            check_room(conn, served, size_gb)
            # Drawn last: a create refused for another reason spends no fault.
            failed = take_create_fault(conn, backend)
            if not failed:
                insert(conn, volume_id, backend, size_gb, volume_type, time.time())
                created = volume_dict(load(conn, volume_id))
        # Raised once the fault's consumption is committed, so the next create succeeds.
        if failed:
            raise VolumeCreateFailed(f"volume {volume_id} on {backend}: injected failure "
                                     "(fail_next_creates)", backend=backend,
                                     volume_id=volume_id)
        return created

    def delete_volume(self, backend: str, volume_id: str, fence: Mapping | None = None,
                      host: str | None = None) -> dict:
        """Delete ``volume_id``; a missing or deleted one is already deleted.

        ``deleted`` in the answer says whether this call deleted it. An
        attached volume is refused (VolumeInUse): detach it first.
        """
        self._served_backend(backend, host)
        with self.store.write() as conn:
            store.check_fence(conn, fence)
            row = load(conn, volume_id)
            if row is None:
                return {"volume_id": volume_id, "backend": backend, "status": DELETED,
                        "deleted": False}
            if row["status"] == DELETED:
                return dict(volume_dict(row), deleted=False)
            if row["backend"] != backend:
                # Saying "deleted" here would leak the volume that does exist.
                raise VolumeMismatch(f"volume {volume_id} is on {row['backend']}, not "
                                     f"{backend}", volume_id=volume_id,
                                     backend=row["backend"])
            if row["status"] == IN_USE:
                raise VolumeInUse(f"volume {volume_id} is attached to {row['attached_to']} "
                                  f"on {row['attached_host']}", volume_id=volume_id,
                                  attached_to=row["attached_to"],
                                  attached_host=row["attached_host"])
            set_status(conn, volume_id, DELETED)
            return dict(volume_dict(load(conn, volume_id)), deleted=True)

    def force_detach_volume(self, backend: str, volume_id: str, fence: Mapping | None = None,
                            host: str | None = None) -> dict:
        """Free ``volume_id`` at the backend, whatever became of the host of its guest.

        As Cinder's os-force_detach: the only way to delete a volume whose
        guest's host died, as a detach needs that host. The guest's own list
        is left alone (its host may not answer); a copy of it that comes
        back still names the volume, and claims it again only if it is free
        then. ``detached`` says whether this call cleared an attachment; an
        available, deleted or unknown volume is left as it is.
        """
        self._served_backend(backend, host)
        with self.store.write() as conn:
            store.check_fence(conn, fence)
            row = load(conn, volume_id)
            if row is None:
                return {"volume_id": volume_id, "backend": backend, "status": None,
                        "detached": False}
            if row["backend"] != backend:
                raise VolumeMismatch(f"volume {volume_id} is on {row['backend']}, not "
                                     f"{backend}", volume_id=volume_id,
                                     backend=row["backend"])
            if row["status"] != IN_USE:
                return dict(volume_dict(row), detached=False)
            set_status(conn, volume_id, AVAILABLE)
            return dict(volume_dict(load(conn, volume_id)), detached=True)

    def get_volume(self, backend: str, volume_id: str, host: str | None = None) -> dict | None:
        """The volume (a deleted one included); None if ``backend`` never had it."""
        self._served_backend(backend, host)
        with self.store.read() as conn:
            row = load(conn, volume_id)
        return volume_dict(row) if row is not None and row["backend"] == backend else None

    def list_volumes(self, backend: str, include_deleted: bool = False,
                     host: str | None = None) -> list[dict]:
        self._served_backend(backend, host)
        with self.store.read() as conn:
            return load_all(conn, backend, include_deleted)

    def volume_create_count(self, volume_id: str) -> int:
        """Effective creates of ``volume_id``, deleted or not."""
        with self.store.read() as conn:
            return create_count(conn, volume_id)

    # -- faults ----------------------------------------------------------------

    def set_backend_faults(self, backend: str, fail_next_creates: int | None = None,
                           host: str | None = None) -> dict:
        """Fail the backend's next N creates (kept in the state file).

        ``host`` only routes the call (it must be served, dead or not): the
        faults are the backend's, whichever host reaches it.
        """
        self._storage.backend(backend)
        if host is not None:
            self._inventory(host)
        with self.store.write() as conn:
            return set_backend_faults(conn, backend, fail_next_creates=fail_next_creates)

    def get_backend_faults(self, backend: str) -> dict:
        self._storage.backend(backend)
        with self.store.read() as conn:
            return backend_faults(conn, backend)

    # -- attachments (inside the guest's write transaction) --------------------

    def _claim_volume(self, conn, host: str, uuid: str, volume_id: str) -> None:
        """Mark a known volume attached to ``uuid`` on ``host``, or refuse why it cannot be.

        A volume id the table does not know is left alone: it was not
        created here, and only its guest's list records it.
        """
        row = load(conn, volume_id)
        if row is None:
            return
        if row["status"] == DELETED:
            raise VolumeNotFound(f"volume {volume_id} was deleted", volume_id=volume_id,
                                 backend=row["backend"])
        backend = self._storage.backend(row["backend"])
        self._storage.check_reach(backend, host)
        if row["attached_to"] not in (None, uuid):
            raise VolumeInUse(f"volume {volume_id} is attached to {row['attached_to']} on "
                              f"{row['attached_host']}", volume_id=volume_id,
                              attached_to=row["attached_to"],
                              attached_host=row["attached_host"])
        if (row["status"], row["attached_to"], row["attached_host"]) != (IN_USE, uuid, host):
            set_status(conn, volume_id, IN_USE, attached_to=uuid, attached_host=host)

    def _release_volumes(self, conn, uuids: Iterable[str]) -> int:
        return release(conn, uuids)
