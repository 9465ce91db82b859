"""Durable state of the fake hypervisor: a SQLite file of its own.

Like a real hypervisor's guests, the simulated hosts' guests must outlive the
process that asked for them, so they live in a file (``[compute] state_path``)
and not in the fleetflow database: after ``kill -9`` a restarted process finds
them again. Several processes may open the same file (WAL, a busy timeout and
``BEGIN IMMEDIATE`` writes), so every check-then-write runs inside one write
transaction.

Plain ``sqlite3``, one connection per thread: a build is ~10 statements, and
SQLAlchemy's per-statement overhead made the driver, not RPC, the bottleneck
(44 builds/s against several hundred with plain statements).

Tables:

- ``guests``: one row per guest and host (an instance being evacuated may briefly
  exist on two hosts). A boot is started by setting ``ready_at``, the time it
  ends, and nothing is written when it ends: a row whose ``state`` says BUILDING
  and whose ``ready_at`` has passed IS ACTIVE, and every read reports it so
  (``guest_dict``). A BUILDING row without ``ready_at`` is "unbooted": its build
  waits for a slot, will fail, or was cut short by a crash before its boot began.
- ``spawns``: effective spawns per instance and host, kept after a destroy, so a
  test can prove an instance was booted at most once. A spawn is counted when
  its boot starts (in the transaction that sets ``ready_at``), not when it ends:
  a guest destroyed or a process killed mid-boot still counts one spawn, so
  "at most one spawn per uuid" checks stay valid and become stricter.
- ``fences``: the highest fencing token seen per key.
- ``moves``: guests moving between hosts, with a duration, like boots
  (``fake_moves``).
- ``host_faults`` / ``server_faults``: the faults every process sharing the file
  must see (a dead host, moves to fail); ``fake_faults`` reads and writes them.
- ``volumes``: block storage volumes on the storage backends, kept after a
  delete (status ``deleted``); ``volume_creates``: effective creates per volume
  id, the volumes' spawn ledger; ``backend_faults``: creates to fail, seen by
  every process. ``fake_storage`` reads and writes them.

A guest's ``data`` is a token standing for its disk's contents: set when it is
built, carried by a live or cold move, new after a rebuild (the data is lost).
Which copies of a host were evacuated while it was dead is not kept here: the
fleetflow database decides it, and the agent destroys them
(``FakeDriver.destroy_copies``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping

from fleetflow.common import states
from fleetflow.common.exceptions import StaleFence
from fleetflow.compute.drivers import fake_capacity

SCHEMA = """
CREATE TABLE IF NOT EXISTS guests (
    host TEXT NOT NULL, uuid TEXT NOT NULL, state TEXT NOT NULL, image TEXT,
    resources TEXT NOT NULL, volumes TEXT NOT NULL, migrated_from TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, ready_at REAL, data TEXT,
    PRIMARY KEY (host, uuid));
CREATE INDEX IF NOT EXISTS ix_guests_uuid ON guests (uuid);
CREATE TABLE IF NOT EXISTS spawns (
    uuid TEXT NOT NULL, host TEXT NOT NULL, builds INTEGER NOT NULL DEFAULT 0,
    rebuilds INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (uuid, host));
CREATE TABLE IF NOT EXISTS fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS moves (
    migration_id TEXT NOT NULL, uuid TEXT NOT NULL, kind TEXT NOT NULL,
    source TEXT NOT NULL, destination TEXT NOT NULL, status TEXT NOT NULL,
    resources TEXT NOT NULL, image TEXT, duration REAL NOT NULL,
    created_at REAL NOT NULL, started_at REAL, ends_at REAL, completed_at REAL,
    updated_at REAL NOT NULL, error TEXT, code TEXT,
    PRIMARY KEY (migration_id, destination));
CREATE INDEX IF NOT EXISTS ix_moves_status ON moves (status, ends_at);
CREATE INDEX IF NOT EXISTS ix_moves_queue ON moves (status, created_at);
CREATE INDEX IF NOT EXISTS ix_moves_uuid ON moves (uuid);
CREATE TABLE IF NOT EXISTS host_faults (
    host TEXT PRIMARY KEY, dead INTEGER NOT NULL DEFAULT 0,
    fail_next_moves INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS server_faults (
    uuid TEXT PRIMARY KEY, fail_move INTEGER NOT NULL DEFAULT 0,
    live_migratable INTEGER NOT NULL DEFAULT 1);
CREATE TABLE IF NOT EXISTS volumes (
    volume_id TEXT PRIMARY KEY, backend TEXT NOT NULL, size_gb INTEGER NOT NULL,
    volume_type TEXT, status TEXT NOT NULL, attached_to TEXT, attached_host TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS ix_volumes_backend ON volumes (backend, status);
CREATE INDEX IF NOT EXISTS ix_volumes_attached_to ON volumes (attached_to);
CREATE TABLE IF NOT EXISTS volume_creates (
    volume_id TEXT PRIMARY KEY, creates INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS backend_faults (
    backend TEXT PRIMARY KEY, fail_next_creates INTEGER NOT NULL DEFAULT 0);
"""

GUEST_SELECT = """
SELECT g.*, COALESCE(s.builds, 0) AS builds FROM guests g
LEFT JOIN spawns s ON s.uuid = g.uuid AND s.host = g.host
"""

BUSY_TIMEOUT_S = 30


class GuestStore:
    """The state file, with a pool of connections shared by the agent's threads.

    A fleet agent runs a thread per build in flight (a thousand, for a
    thousand two-second boots); a connection per thread meant opening a
    thousand connections. Connections are lent for one transaction or read
    and come back to the pool, so there are as many as were ever in use at once.
    """

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._connections: set[sqlite3.Connection] = set()
        self._lock = threading.Lock()
        # This process's writers queue here rather than on SQLite's lock,
        # whose busy handler polls with sleeps of up to 100 ms: a thousand
        # builds at once spent more CPU retrying the lock than writing.
        self._writer = threading.Lock()
        # IF NOT EXISTS: two processes opening a new file at once both succeed.
        with self.read() as conn:
            conn.executescript(SCHEMA)
            add_ready_at(conn)
            add_data(conn)

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN ourselves (IMMEDIATE for
        # writes, so two check-then-write transactions never interleave).
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        with self._lock:
            self._connections.add(conn)
        return conn

    @contextlib.contextmanager
    def _lent(self) -> Iterator[sqlite3.Connection]:
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = self._open()
        try:
            yield conn
        finally:
            with self._lock:
                live = conn in self._connections
            if live:
                self._idle.put(conn)
            else:  # the store was closed meanwhile
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed on success, rolled back on error."""
        with self._writer, self._lent() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A connection for single-statement reads (autocommit, WAL snapshot)."""
        with self._lent() as conn:
            yield conn

    def close(self) -> None:
        """Close every connection; the store opens new ones if it is used again."""
        with self._lock:
            connections, self._connections = self._connections, set()
        with contextlib.suppress(queue.Empty):
            while True:
                self._idle.get_nowait()
        for conn in connections:
            with contextlib.suppress(sqlite3.Error):
                conn.close()


def add_guest_column(conn, name: str, declaration: str) -> None:
    """Give ``guests`` a column added since the file was created."""
    columns = {row["name"] for row in conn.execute("PRAGMA table_info(guests)")}
    if name in columns:
        return
    try:
        conn.execute(f"ALTER TABLE guests ADD COLUMN {name} {declaration}")
    except sqlite3.OperationalError as exc:
        # Another process opening the same old file added it first.
        if "duplicate column" not in str(exc):
            raise


def add_ready_at(conn) -> None:
    add_guest_column(conn, "ready_at", "REAL")


def add_data(conn) -> None:
    # Guests of an older file keep no token (NULL): their data was never tracked.
    add_guest_column(conn, "data", "TEXT")


def new_data_token() -> str:
    return secrets.token_hex(8)


def guest_state(row, now: float) -> str:
    """BUILDING until its boot's ``ready_at``, ACTIVE from then on (no write at the end)."""
    ready_at = row["ready_at"]
    if row["state"] == states.BUILDING and ready_at is not None and ready_at <= now:
        return states.ACTIVE
    return row["state"]


def guest_dict(row, now: float | None = None) -> dict:
    """A guest as the agent returns it (JSON-safe), its state as of ``now``."""
    return {
        "uuid": row["uuid"], "host": row["host"],
        "state": guest_state(row, time.time() if now is None else now),
        "image": row["image"], "resources": json.loads(row["resources"]),
        "volumes": json.loads(row["volumes"]), "migrated_from": row["migrated_from"],
        "created_at": row["created_at"], "ready_at": row["ready_at"],
        "spawn_count": row["builds"], "data_token": row["data"],
    }


def unbooted(guest: Mapping) -> bool:
    """BUILDING with no boot started: waiting for a slot, failing, or cut short by a crash."""
    return guest["state"] == states.BUILDING and guest["ready_at"] is None


def load_guest(conn, host: str, uuid: str) -> dict | None:
    row = conn.execute(GUEST_SELECT + " WHERE g.host = ? AND g.uuid = ?",
                       (host, uuid)).fetchone()
    return guest_dict(row) if row is not None else None


def load_guests(conn, host: str) -> list[dict]:
    rows = conn.execute(GUEST_SELECT + " WHERE g.host = ? ORDER BY g.created_at, g.uuid",
                        (host,))
    now = time.time()
    return [guest_dict(row, now) for row in rows]


def insert_guest(conn, host: str, uuid: str, state: str, image: str | None,
                 resources: Mapping, volumes: list | None = None,
                 migrated_from: str | None = None, data: str | None = None) -> None:
    """Insert one guest; with no ``data`` it gets a new token (a fresh disk)."""
    now = time.time()
    conn.execute(
        "INSERT INTO guests (host, uuid, state, image, resources, volumes, migrated_from,"
        " created_at, updated_at, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (host, uuid, state, image, json.dumps({rc: int(v) for rc, v in resources.items() if v}),
         json.dumps(volumes or []), migrated_from, now, now, data or new_data_token()))


# The rows ``unbooted`` is true of. A state filter alone would also match
# guests whose boot started, some of which are ACTIVE by now.
UNBOOTED_WHERE = f" AND state = '{states.BUILDING}' AND ready_at IS NULL"


def update_guest(conn, host: str, uuid: str, unbooted_only: bool = False, **values) -> int:
    """Set columns of one guest (``unbooted_only``: only if no boot was started for it)."""
    if "volumes" in values:
        values["volumes"] = json.dumps(values["volumes"])
    values["updated_at"] = time.time()
    sets = ", ".join(f"{column} = ?" for column in values)
    where = "host = ? AND uuid = ?" + (UNBOOTED_WHERE if unbooted_only else "")
    return conn.execute(f"UPDATE guests SET {sets} WHERE {where}",
                        [*values.values(), host, uuid]).rowcount


def update_guest_in_state(conn, host: str, uuid: str, current: str, new: str) -> bool:
    """Set a guest's state to ``new`` if it reads ``current`` now.

    Compared with the state it reads as, not the column: a guest whose boot
    is over reads ACTIVE while its row still says BUILDING.
    """
    guest = load_guest(conn, host, uuid)
    if guest is None or guest["state"] != current:
        return False
    return bool(update_guest(conn, host, uuid, state=new))


def delete_guest(conn, host: str, uuid: str, unbooted_only: bool = False) -> int:
    """Delete one guest (``unbooted_only``: only if no boot was started for it)."""
    where = "host = ? AND uuid = ?" + (UNBOOTED_WHERE if unbooted_only else "")
    return conn.execute(f"DELETE FROM guests WHERE {where}", (host, uuid)).rowcount


def start_boot(conn, host: str, uuid: str, ready_at: float, ledger: str) -> bool:
    """Start an unbooted guest's boot, ending at ``ready_at``, and count its spawn.

    False, changing nothing, when the guest is gone or its boot was started
    meanwhile (by another process sharing the file).
    """
    if not update_guest(conn, host, uuid, unbooted_only=True, ready_at=ready_at):
        return False
    count_spawn(conn, host, uuid, ledger)
    return True


def end_boot_now(conn, host: str, uuid: str) -> None:
    """Bring a boot still under way to its end now (the driver is shutting down)."""
    now = time.time()
    conn.execute(f"UPDATE guests SET ready_at = ?, updated_at = ? WHERE host = ? AND uuid = ?"
                 f" AND state = '{states.BUILDING}' AND ready_at > ?",
                 (now, now, host, uuid, now))


def guest_before_spawn(conn, host: str, uuid: str, inventory: Mapping, resources: Mapping,
                       fence: Mapping | None) -> dict | None:
    """Inside a spawn's first write: fence checked, the guest if any.

    With no guest yet, the host must have room for it: capacity is taken when
    the request arrives (the row is the claim), so builds waiting for a slot
    cannot overcommit.
    """
    check_fence(conn, fence)
    guest = load_guest(conn, host, uuid)
    if guest is None:
        fake_capacity.check_capacity(conn, host, inventory, resources)
    return guest


def check_fence(conn, fence: Mapping | None) -> None:
    """Refuse a token older than the newest seen for its key; remember newer ones."""
    if not fence:
        return
    key, token = str(fence["key"]), int(fence["token"])
    row = conn.execute("SELECT token FROM fences WHERE key = ?", (key,)).fetchone()
    if row is None:
        conn.execute("INSERT INTO fences (key, token) VALUES (?, ?)", (key, token))
    elif row[0] > token:
        raise StaleFence(f"host refuses job {key}: token {token} is stale (current {row[0]})",
                         key=key, current=row[0], token=token)
    elif token > row[0]:
        conn.execute("UPDATE fences SET token = ? WHERE key = ?", (token, key))


def count_spawn(conn, host: str, uuid: str, column: str) -> None:
    """Add one effective spawn (``builds`` or ``rebuilds``) to the ledger."""
    builds, rebuilds = (1, 0) if column == "builds" else (0, 1)
    conn.execute(
        "INSERT INTO spawns (uuid, host, builds, rebuilds) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (uuid, host) DO UPDATE SET builds = builds + excluded.builds, "
        "rebuilds = rebuilds + excluded.rebuilds", (uuid, host, builds, rebuilds))


def spawn_count(conn, uuid: str, host: str | None = None, ledger: str = "builds") -> int:
    column = "rebuilds" if ledger == "rebuilds" else "builds"
    if host is None:
        row = conn.execute(f"SELECT SUM({column}) FROM spawns WHERE uuid = ?",
                           (uuid,)).fetchone()
    else:
        row = conn.execute(f"SELECT SUM({column}) FROM spawns WHERE uuid = ? AND host = ?",
                           (uuid, host)).fetchone()
    return int(row[0] or 0)


def delete_guests(conn, host: str, uuids: list[str], keep_state: str | None = None,
                  chunk: int = 500) -> list[str]:
    """Delete these guests of ``host`` (but those in ``keep_state``); returns the deleted."""
    gone = []
    for start in range(0, len(uuids), chunk):
        part = list(uuids[start:start + chunk])
        marks = ", ".join("?" * len(part))
        where = f"WHERE host = ? AND uuid IN ({marks}) AND state IS NOT ?"
        args = [host, *part, keep_state]
        gone += [row[0] for row in conn.execute(f"SELECT uuid FROM guests {where}", args)]
        conn.execute(f"DELETE FROM guests {where}", args)
    return sorted(gone)
