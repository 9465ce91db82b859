"""Guests moving between the simulated hosts: persisted records with a duration.

A move is like a boot: one write starts it and sets when it ends
(``ends_at``); nobody sleeps through it. It is advanced lazily, inside the
write transaction of whichever call touches a move next (start, get,
confirm, revert), and that transaction advances every move of the file whose
time has come, not only its own: a slot freed by one host's move is what
starts another host's queued move, and the limits are counted over the whole
file, so they hold across the processes sharing it.

- ``queued``: waiting for a slot. A move runs only while its source sends
  fewer than ``max_outgoing`` and its destination receives fewer than
  ``max_incoming`` (a rebuild's source is dead and sends nothing). Queued moves
  start oldest first.
- ``running`` until ``ends_at``; then, at the switch-over, ``completed`` or
  ``failed``. The destination holds the guest's capacity from the request on,
  in a ``MIGRATING`` row, as a build waiting for a slot does.
- ``confirmed`` / ``reverted``: ended by the caller.

Every slot-freeing write (a move ending, a revert) runs the queue in the same
transaction, so a queued move that could start has started: a read that finds
no running move past its ``ends_at`` knows nothing would change, and polling
costs no write lock.

Records are keyed by (migration id, destination): a caller may send a
migration id it reverted on one destination to another, and a re-run polling
the first destination must still find its own record there.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Mapping

from fleetflow.common import states
from fleetflow.common.exceptions import InvalidInput
from fleetflow.compute import moves as mv
from fleetflow.compute.drivers import fake_capacity
from fleetflow.compute.drivers import fake_faults as faults
from fleetflow.compute.drivers import fake_store as store
from fleetflow.compute.exceptions import (
    HostDead,
    InstanceNotFound,
    LiveMigrationUnsupported,
    MoveFailed,
    SourceAlive,
)


@dataclasses.dataclass(frozen=True)
class MoveRules:
    """How long moves take and how many run at once per host."""

    live_seconds: float = 0.0
    migrate_seconds: float = 0.0
    max_outgoing: int = 4
    max_incoming: int = 4

    def duration(self, kind: str) -> float:
        return self.live_seconds if kind == mv.LIVE else self.migrate_seconds


def record_dict(row) -> dict:
    return {key: row[key] for key in mv.RECORD_KEYS}


def load(conn, migration_id: str, destination: str):
    return conn.execute("SELECT * FROM moves WHERE migration_id = ? AND destination = ?",
                        (migration_id, destination)).fetchone()


def anything_due(conn, now: float) -> bool:
    """Whether a running move has reached its end (so advancing would write)."""
    return conn.execute("SELECT 1 FROM moves WHERE status = ? AND ends_at <= ? LIMIT 1",
                        (mv.RUNNING, now)).fetchone() is not None


def move_count(conn, uuid: str) -> int:
    """Moves of ``uuid`` that completed (reverted afterwards or not)."""
    return conn.execute("SELECT COUNT(*) FROM moves WHERE uuid = ? AND completed_at IS NOT NULL",
                        (uuid,)).fetchone()[0]


def _incoming(conn, host: str, uuid: str) -> dict | None:
    guest = store.load_guest(conn, host, uuid)
    return guest if guest is not None and guest["state"] == mv.MIGRATING else None


def _drop_incoming(conn, host: str, uuid: str) -> None:
    conn.execute("DELETE FROM guests WHERE host = ? AND uuid = ? AND state = ?",
                 (host, uuid, mv.MIGRATING))


def _power_on_source(conn, row) -> None:
    store.update_guest_in_state(conn, row["source"], row["uuid"], mv.SHUTOFF, states.ACTIVE)


def _set(conn, row, now: float, **values) -> None:
    values["updated_at"] = now
    sets = ", ".join(f"{column} = ?" for column in values)
    conn.execute(f"UPDATE moves SET {sets} WHERE migration_id = ? AND destination = ?",
                 [*values.values(), row["migration_id"], row["destination"]])


# -- admission ------------------------------------------------------------


def admit(conn, rules: MoveRules, *, migration_id: str, kind: str, uuid: str, source: str,
          destination: str, resources: Mapping, image: str | None, inventory: Mapping,
          now: float) -> None:
    """Check a new move and write it, queued; raise, writing nothing, if it may not start."""
    if kind not in mv.KINDS:
        raise InvalidInput(f"unknown move kind {kind!r}", kind=kind)
    if source == destination:
        raise InvalidInput(f"{uuid}: source and destination are both {source}", host=source)
    if faults.is_dead(conn, destination):
        raise HostDead(f"host {destination} is dead", host=destination)
    data = None  # a rebuild starts from the image: a new disk
    if kind == mv.REBUILD:
        if not faults.is_dead(conn, source):
            raise SourceAlive(f"{uuid} cannot be rebuilt on {destination}: its host {source} "
                              "is alive, and would run a second copy", host=source, uuid=uuid)
    else:
        if faults.is_dead(conn, source):
            raise HostDead(f"host {source} is dead: {uuid} cannot be moved off it by a "
                           f"{kind} migration", host=source)
        origin = store.load_guest(conn, source, uuid)
        if origin is None or origin["state"] == mv.MIGRATING:
            raise InstanceNotFound(f"{uuid} is not on {source}", host=source, uuid=uuid)
        if kind == mv.LIVE and not faults.server_faults(conn, uuid)["live_migratable"]:
            raise LiveMigrationUnsupported(f"{uuid} cannot be live-migrated", uuid=uuid,
                                           host=source)
        image, data = origin["image"], origin["data_token"]
    if store.load_guest(conn, destination, uuid) is not None:
        raise MoveFailed(f"{uuid} is already on {destination}", host=destination, uuid=uuid,
                         migration_id=migration_id)
    fake_capacity.check_capacity(conn, destination, inventory, resources)
    store.insert_guest(conn, destination, uuid, mv.MIGRATING, image, resources,
                       migrated_from=source, data=data)
    conn.execute(
        "INSERT INTO moves (migration_id, uuid, kind, source, destination, status, resources,"
        " image, duration, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (migration_id, uuid, kind, source, destination, mv.QUEUED,
         json.dumps({rc: int(v) for rc, v in resources.items() if v}), image,
         rules.duration(kind), now, now))


# -- advancing ------------------------------------------------------------


def advance(conn, rules: MoveRules, now: float) -> bool:
    """Finish the moves whose time has come and start queued ones; whether anything changed.

    Repeated until nothing starts: 0-second moves end as they start, and
    each end frees a slot for the next one.
    """
    changed = False
    while True:
        changed |= _finish_due(conn, now)
        if not _start_queued(conn, rules, now):
            return changed
        changed = True


def _sends(kind: str) -> bool:
    """Whether a move of ``kind`` takes one of its source's outgoing slots: a
    rebuild's source is dead and sends nothing."""
    return kind != mv.REBUILD


def _start_queued(conn, rules: MoveRules, now: float) -> bool:
    queued = conn.execute("SELECT * FROM moves WHERE status = ? ORDER BY created_at, "
                          "migration_id", (mv.QUEUED,)).fetchall()
    if not queued:
        return False
    outgoing: collections.Counter = collections.Counter()
    incoming: collections.Counter = collections.Counter()
    for kind, source, destination in conn.execute(
            "SELECT kind, source, destination FROM moves WHERE status = ?", (mv.RUNNING,)):
        incoming[destination] += 1
        if _sends(kind):
            outgoing[source] += 1
    started = False
    for row in queued:
        sends = _sends(row["kind"])
        if incoming[row["destination"]] >= rules.max_incoming or (
                sends and outgoing[row["source"]] >= rules.max_outgoing):
            continue
        incoming[row["destination"]] += 1
        if sends:
            outgoing[row["source"]] += 1
        if row["kind"] == mv.COLD:
            # Powered off for the copy; back on if the move fails or is reverted.
            store.update_guest_in_state(conn, row["source"], row["uuid"], states.ACTIVE,
                                        mv.SHUTOFF)
        _set(conn, row, now, status=mv.RUNNING, started_at=now,
             ends_at=now + row["duration"])
        started = True
    return started


def _finish_due(conn, now: float) -> bool:
    due = conn.execute("SELECT * FROM moves WHERE status = ? AND ends_at <= ? "
                       "ORDER BY ends_at, migration_id", (mv.RUNNING, now)).fetchall()
    for row in due:
        _finish(conn, row, now)
    return bool(due)


def _switch_over_problem(conn, row) -> str | None:
    """Why the move cannot switch over now, or None."""
    uuid, source, destination = row["uuid"], row["source"], row["destination"]
    if faults.is_dead(conn, destination):
        return f"destination host {destination} died during the move"
    if row["kind"] != mv.REBUILD:
        if faults.is_dead(conn, source):
            return f"source host {source} died during the move"
        origin = store.load_guest(conn, source, uuid)
        if origin is None or origin["state"] == mv.MIGRATING:
            return f"{uuid} is no longer on {source}"
    if _incoming(conn, destination, uuid) is None:
        return f"the incoming copy of {uuid} on {destination} was destroyed"
    # Another move of the server that completed after this one was asked for
    # got there first (a retry elsewhere while this host could not be
    # reached to revert): completing this one too would make two copies.
    if conn.execute("SELECT 1 FROM moves WHERE uuid = ? AND completed_at >= ? AND NOT "
                    "(migration_id = ? AND destination = ?) LIMIT 1",
                    (uuid, row["created_at"], row["migration_id"], destination)).fetchone():
        return f"{uuid} was moved by another move meanwhile"
    if faults.take_move_fault(conn, destination):
        return "injected failure (fail_next_moves)"
    if faults.server_faults(conn, uuid)["fail_move"]:
        return "injected failure (fail_move)"
    return None


def _fail(conn, row, error: str, now: float) -> None:
    """Failed: nothing left on the destination, the source copy as it was."""
    _drop_incoming(conn, row["destination"], row["uuid"])
    if row["kind"] == mv.COLD:
        _power_on_source(conn, row)
    _set(conn, row, now, status=mv.FAILED, error=error, code=MoveFailed.code)


def _finish(conn, row, now: float) -> None:
    problem = _switch_over_problem(conn, row)
    if problem is not None:
        _fail(conn, row, problem, now)
        return
    uuid, source, destination = row["uuid"], row["source"], row["destination"]
    if row["kind"] == mv.REBUILD:
        store.update_guest(conn, destination, uuid, state=states.ACTIVE, image=row["image"],
                           volumes=[], data=store.new_data_token())
        store.count_spawn(conn, destination, uuid, "rebuilds")
    else:
        # Copied as it is at the switch-over: a live guest kept running meanwhile.
        origin = store.load_guest(conn, source, uuid)
        store.update_guest(conn, destination, uuid, state=states.ACTIVE,
                           image=origin["image"], volumes=origin["volumes"],
                           data=origin["data_token"])
        if row["kind"] == mv.LIVE:
            store.delete_guest(conn, source, uuid)
    _set(conn, row, now, status=mv.COMPLETED, completed_at=now)


def host_died(conn, rules: MoveRules, host: str, now: float) -> int:
    """Fail the moves under way to or from ``host``, which just died; how many.

    The switch-over would fail them anyway; failing them now also makes a
    host that comes back before their end find nothing half-moved.
    A rebuild's source is dead already: only its destination matters.
    """
    rows = conn.execute(
        "SELECT * FROM moves WHERE status IN (?, ?) AND (destination = ? OR "
        "(source = ? AND kind != ?))", (mv.QUEUED, mv.RUNNING, host, host, mv.REBUILD)
    ).fetchall()
    for row in rows:
        side = "destination" if row["destination"] == host else "source"
        _fail(conn, row, f"{side} host {host} died during the move", now)
    if rows:
        advance(conn, rules, now)
    return len(rows)


# -- ending ---------------------------------------------------------------


def confirm(conn, row, now: float) -> None:
    """completed -> confirmed (a cold move's powered-off source copy goes); else MoveFailed."""
    if row["status"] == mv.CONFIRMED:
        return
    if row["status"] != mv.COMPLETED:
        raise MoveFailed(_cannot(row, "confirmed"), migration_id=row["migration_id"],
                         uuid=row["uuid"], status=row["status"], error=row["error"])
    # A dead source's copy stays: the host destroys it when it comes back, as
    # the database tells it (it must not be touched while the host is dead).
    if row["kind"] == mv.COLD and not faults.is_dead(conn, row["source"]):
        conn.execute("DELETE FROM guests WHERE host = ? AND uuid = ? AND state = ?",
                     (row["source"], row["uuid"], mv.SHUTOFF))
    _set(conn, row, now, status=mv.CONFIRMED)


def revert(conn, rules: MoveRules, row, now: float,
           source_inventory: Mapping | None = None) -> None:
    """Undo the move: the server where it was before (its destination copy gone)."""
    status, kind = row["status"], row["kind"]
    uuid, source, destination = row["uuid"], row["source"], row["destination"]
    if status == mv.REVERTED:
        return
    if status == mv.CONFIRMED:
        raise MoveFailed(_cannot(row, "reverted"), migration_id=row["migration_id"],
                         uuid=uuid, status=status)
    if status != mv.COMPLETED:
        _drop_incoming(conn, destination, uuid)
    elif kind == mv.LIVE:
        if faults.is_dead(conn, source):
            raise MoveFailed(f"{uuid} cannot be moved back to {source}: the host is dead",
                             migration_id=row["migration_id"], uuid=uuid, host=source)
        arrived = store.load_guest(conn, destination, uuid)
        if arrived is not None and store.load_guest(conn, source, uuid) is None:
            if source_inventory is not None:
                fake_capacity.check_capacity(conn, source, source_inventory, arrived["resources"])
            store.insert_guest(conn, source, uuid, states.ACTIVE, arrived["image"],
                               arrived["resources"], volumes=arrived["volumes"],
                               migrated_from=destination, data=arrived["data_token"])
        store.delete_guest(conn, destination, uuid)
    else:
        store.delete_guest(conn, destination, uuid)
    if kind == mv.COLD:
        _power_on_source(conn, row)
    _set(conn, row, now, status=mv.REVERTED)
    if status == mv.RUNNING:  # its slots are free: the queue may move on
        advance(conn, rules, now)


def _cannot(row, what: str) -> str:
    reason = f": {row['error']}" if row["error"] else ""
    return (f"move {row['migration_id']} of {row['uuid']} to {row['destination']} is "
            f"{row['status']}{reason}; it cannot be {what}")
