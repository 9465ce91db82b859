"""The move calls of the fake hypervisor: start a move, poll it, end it.

The move records and their queue live in ``fake_moves``; these are the calls
an agent serves on them, and what a host's death does to its moves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from fleetflow.compute.drivers import fake_moves as moves
from fleetflow.compute.drivers import fake_store as store
from fleetflow.compute.exceptions import MoveFailed


class MoveCalls:
    """The move calls of ``FakeDriver``.

    Uses the driver's ``store``, ``move_rules`` (a ``fake_moves.MoveRules``),
    ``_inventory``, ``_inventories`` and ``_check_alive``.
    """

    def start_move(self, host: str, migration_id: str, kind: str, uuid: str,
                   source_host: str, resources: Mapping, image: str | None = None,
                   fence: Mapping | None = None) -> dict:
        """Start moving ``uuid`` from ``source_host`` to ``host``; returns the move record.

        Idempotent: a move already recorded under ``migration_id`` for ``host``
        is returned as it stands now. ``image`` is what a rebuild spawns from.
        """
        self._check_alive(host)
        inventory = self._inventory(host)
        with self.store.write() as conn:
            now = time.time()  # once the write lock is ours: the queue's order is this
            store.check_fence(conn, fence)
            row = moves.load(conn, migration_id, host)
            if row is None:
                moves.admit(conn, self.move_rules, migration_id=migration_id, kind=kind,
                            uuid=uuid, source=source_host, destination=host,
                            resources=resources, image=image, inventory=inventory, now=now)
            elif (row["uuid"], row["kind"]) != (uuid, kind):
                raise MoveFailed(f"move {migration_id} to {host} is the {row['kind']} move "
                                 f"of {row['uuid']}", migration_id=migration_id, uuid=uuid)
            moves.advance(conn, self.move_rules, now)
            return moves.record_dict(moves.load(conn, migration_id, host))

    def get_move(self, host: str, migration_id: str) -> dict | None:
        """The move as it stands now; None if ``host`` never received it."""
        self._check_alive(host)
        with self.store.read() as conn:
            due = moves.anything_due(conn, time.time())
            row = None if due else moves.load(conn, migration_id, host)
        if due:  # any poll moves the whole queue on, not only its own move
            with self.store.write() as conn:
                moves.advance(conn, self.move_rules, time.time())
                row = moves.load(conn, migration_id, host)
        return moves.record_dict(row) if row is not None else None

    def confirm_move(self, host: str, migration_id: str, fence: Mapping | None = None) -> dict:
        """End a completed move for good (MoveFailed if it did not complete)."""
        return self._end_move(host, migration_id, fence, confirm=True)

    def revert_move(self, host: str, migration_id: str,
                    fence: Mapping | None = None) -> dict | None:
        """Undo a move not confirmed yet; None if ``host`` never received it."""
        return self._end_move(host, migration_id, fence, confirm=False)

    def _end_move(self, host, migration_id, fence, confirm: bool) -> dict | None:
        self._check_alive(host)
        with self.store.write() as conn:
            now = time.time()
            store.check_fence(conn, fence)
            moves.advance(conn, self.move_rules, now)
            row = moves.load(conn, migration_id, host)
            if row is None:
                if confirm:
                    raise MoveFailed(f"host {host} has no move {migration_id} to confirm",
                                     migration_id=migration_id, host=host)
                return None
            if confirm:
                moves.confirm(conn, row, now)
            else:
                moves.revert(conn, self.move_rules, row, now,
                             source_inventory=self._inventories.get(row["source"]))
            return moves.record_dict(moves.load(conn, migration_id, host))

    def _host_died(self, conn, host: str) -> None:
        """Fail the moves under way to or from ``host``, in the write that marks it dead."""
        moves.host_died(conn, self.move_rules, host, time.time())

    def move_count(self, uuid: str) -> int:
        """Moves of ``uuid`` that completed, on every host (a double move stays visible)."""
        with self.store.read() as conn:
            return moves.move_count(conn, uuid)
