"""Moves on Nova: one try at moving a server, found again by its migration id.

A try is started by tagging the server ``fleetflow-move:<migration id>`` and
writing in its metadata the try's kind, source and destination and the
newest of Nova's migrations of the server at that moment; only then is Nova
asked (os-migrateLive, migrate or evacuate, each with ``host``). Nova's
migration records newer than that one are the try's. So a start sent again
after a crash or a lost answer finds the try, and sends Nova's request again
only when no migration of it exists and the server is still idle where it was.

The record answered is the simulated hosts' (``fleetflow.compute.moves``):
``queued``/``running`` while Nova works, ``completed`` when the server runs
on the destination (a cold move waiting in VERIFY_RESIZE included),
``confirmed`` once a cold move is confirmed, ``failed`` with Nova's error.
"""

from __future__ import annotations

import threading
import time

from fleetflow.compute import moves as mv
from fleetflow.compute.exceptions import MoveFailed
from fleetflow.compute.openstack.nova import (
    Refused,
    host_of,
    move_tag,
    task_state_of,
)

PLACEMENT_MICROVERSION = "1.28"
# Nova's migration statuses, by what they mean for a try.
_DONE = {"completed", "done", "finished", "confirmed"}
_FAILED = {"error", "failed", "cancelled", "reverted"}


class Moves:
    """The tries of one driver. A try polled every ``[openstack] poll_interval`` is
    answered from the watch's listing of every try under way (``watch.py``). Confirming
    and undoing read the server directly: which server a try moves is remembered once
    found (its tag is checked on each read, and searched for again if it is gone: the
    tag, not this memory, is what a restarted process finds the try by)."""

    def __init__(self, nova, conf, watch):
        self.nova = nova
        self.conf = conf
        self.watch = watch
        self._servers: dict[str, str] = {}
        self._lock = threading.Lock()

    def _server_of(self, migration_id: str) -> dict | None:
        tag = move_tag(migration_id)
        with self._lock:
            server_id = self._servers.get(migration_id)
        if server_id is not None:
            server = self.nova.server(server_id)
            if server is not None and tag in (server.get("tags") or ()):
                return server
        found = self.nova.tagged(tag)
        self._remember(migration_id, found[0]["id"] if found else None)
        return found[0] if found else None

    def _remember(self, migration_id: str, server_id: str | None) -> None:
        with self._lock:
            if server_id is None:
                self._servers.pop(migration_id, None)
            else:
                self._servers[migration_id] = server_id

    def start(self, server: dict, migration_id: str, kind: str, uuid: str,
              source: str, destination: str) -> dict:
        tagged = self._server_of(migration_id)
        if tagged is not None:
            record = self._record(tagged, migration_id)
            if record["status"] != mv.QUEUED or not self._idle_on(tagged, source):
                return record
            server = tagged  # tagged, but Nova was never asked: ask now
        else:
            known = self.nova.migrations(server["id"])
            self.nova.set_metadata(server["id"], {
                "fleetflow_move": migration_id, "fleetflow_move_kind": kind,
                "fleetflow_move_source": source, "fleetflow_move_destination": destination,
                "fleetflow_move_after": str(known[0]["id"] if known else 0),
                "fleetflow_instance": uuid})
            self.nova.add_tag(server["id"], move_tag(migration_id))
            self._remember(migration_id, server["id"])
        try:
            self.nova.action(server["id"], _request(kind, destination))
        except Refused as exc:
            raise MoveFailed(f"{uuid}: Nova refused the {kind} move to {destination}: "
                             f"{exc.message}", host=destination,
                             migration_id=migration_id) from exc
        return self._record(self.nova.server(server["id"]) or server, migration_id)

    def _idle_on(self, server: dict, source: str) -> bool:
        return (host_of(server) == source and task_state_of(server) is None
                and server["status"] in ("ACTIVE", "SHUTOFF", "ERROR"))

    def get(self, migration_id: str) -> dict | None:
        """The try's record, from the watch's listing (at most one interval old)."""
        found = self.watch.servers(move_tag(migration_id))
        if not found:
            return None
        self._remember(migration_id, found[0]["id"])
        return self._record(found[0], migration_id)

    def _record(self, server: dict, migration_id: str) -> dict:
        meta = server.get("metadata") or {}
        kind = meta.get("fleetflow_move_kind")
        source = meta.get("fleetflow_move_source")
        destination = meta.get("fleetflow_move_destination")
        if meta.get("fleetflow_move") != migration_id:
            # A later try on the same server took its metadata: this one has ended.
            return _record(migration_id, meta, kind, source, destination, mv.FAILED,
                           "superseded by a later move")
        if task_state_of(server) is not None and server["status"] != "ERROR":
            # Nova sets the task state before it answers a move's request: a server
            # busy after this try was asked is this try's move under way, and its
            # migration records need not be read until the server is idle again.
            return _record(migration_id, meta, kind, source, destination, mv.RUNNING)
        after = int(meta.get("fleetflow_move_after") or 0)
        ours = [m for m in self.nova.migrations(server["id"]) if m["id"] > after]
        if not ours:
            return _record(migration_id, meta, kind, source, destination, mv.QUEUED)
        migration = ours[0]
        status = migration["status"]
        if status in _FAILED:
            return _record(migration_id, meta, kind, source, destination, mv.FAILED,
                           f"Nova's migration {migration['id']} is {status}")
        landed = host_of(server) == destination and task_state_of(server) is None
        if status in _DONE and landed:
            if server["status"] == "VERIFY_RESIZE":
                return _record(migration_id, meta, kind, source, destination, mv.COMPLETED)
            if server["status"] in ("ACTIVE", "SHUTOFF"):
                done = mv.CONFIRMED if status == "confirmed" else mv.COMPLETED
                return _record(migration_id, meta, kind, source, destination, done)
        if server["status"] == "ERROR":
            return _record(migration_id, meta, kind, source, destination, mv.FAILED,
                           (server.get("fault") or {}).get("message", "server went ERROR"))
        return _record(migration_id, meta, kind, source, destination, mv.RUNNING)

    def confirm(self, migration_id: str) -> dict | None:
        """A cold move in VERIFY_RESIZE is confirmed (the source's allocation goes);
        Nova confirms live moves and evacuations itself."""
        server = self._server_of(migration_id)
        if server is None:
            return None
        record = self._record(server, migration_id)
        if record["status"] == mv.CONFIRMED:
            return record
        if record["status"] != mv.COMPLETED:
            raise MoveFailed(f"move {migration_id} is {record['status']}: nothing to confirm",
                             migration_id=migration_id)
        if server["status"] == "VERIFY_RESIZE":
            self.nova.action(server["id"], {"confirmResize": None})
            server = self._wait(server["id"], lambda s: s["status"] != "VERIFY_RESIZE")
        if record["kind"] == mv.REBUILD:
            self._drop_source_allocation(server["id"], record["destination"])
        self._remember(migration_id, None)  # the try has ended: its tag finds it again
        return dict(record, status=mv.CONFIRMED)

    def _drop_source_allocation(self, server_id: str, destination: str) -> None:
        """After an evacuation Nova leaves the server's allocation on the dead source
        too, until that host's compute service starts again and removes it; the
        confirm makes the same change now: the allocation keeps the destination's
        providers only. Guarded by the consumer generation, so a write that races
        another is read again and retried; repeating it changes nothing."""
        placement = self.nova.connection.placement
        keep = self.nova.providers_of(destination)
        for _ in range(5):
            body = placement.get(f"/allocations/{server_id}",
                                 microversion=PLACEMENT_MICROVERSION).json()
            held = body.get("allocations") or {}
            if not held or set(held) <= keep:
                return
            kept = {rp: {"resources": a["resources"]} for rp, a in held.items() if rp in keep}
            if not kept:
                return  # not on the destination: nothing fleetflow should judge
            response = placement.put(f"/allocations/{server_id}", json={
                "allocations": kept, "project_id": body["project_id"],
                "user_id": body["user_id"],
                "consumer_generation": body["consumer_generation"]},
                microversion=PLACEMENT_MICROVERSION, raise_exc=False)
            if response.status_code in (200, 204):
                return
            if response.status_code != 409:
                raise MoveFailed(f"server {server_id}: the cloud's Placement refused to drop "
                                 f"the dead source's allocation: {response.status_code}")

    def revert(self, migration_id: str) -> dict | None:
        """Undo a try not confirmed: a cold move is reverted (the server runs on
        its source again), a live move under way is aborted and one that landed
        goes back live; a rebuild cannot be undone (its source is dead)."""
        server = self._server_of(migration_id)
        if server is None:
            return None
        record = self._record(server, migration_id)
        kind, source = record["kind"], record["source"]
        if server["status"] == "VERIFY_RESIZE":
            self.nova.action(server["id"], {"revertResize": None})
            self._wait(server["id"], lambda s: s["status"] != "VERIFY_RESIZE"
                       and task_state_of(s) is None)
        elif kind == mv.LIVE and record["status"] == mv.RUNNING:
            for migration in self.nova.migrations(server["id"])[:1]:
                self.nova.abort_migration(server["id"], migration["id"])
        elif kind == mv.LIVE and record["status"] == mv.COMPLETED and source:
            self.nova.action(server["id"], {"os-migrateLive": {
                "host": source, "block_migration": "auto"}})
            self._wait(server["id"], lambda s: host_of(s) == source
                       and task_state_of(s) is None)
        self._remember(migration_id, None)
        return dict(record, status=mv.REVERTED)

    def _wait(self, server_id: str, done) -> dict:
        deadline = time.monotonic() + self.conf.openstack.move_timeout
        while True:
            server = self.nova.server(server_id)
            if server is None or done(server) or time.monotonic() > deadline:
                return server
            time.sleep(self.conf.openstack.poll_interval)


def _request(kind: str, destination: str) -> dict:
    if kind == mv.LIVE:
        return {"os-migrateLive": {"host": destination, "block_migration": "auto"}}
    if kind == mv.COLD:
        return {"migrate": {"host": destination}}
    if kind == mv.REBUILD:
        return {"evacuate": {"host": destination}}
    raise MoveFailed(f"unknown kind of move {kind!r}")


def _record(migration_id, meta, kind, source, destination, status, error=None) -> dict:
    return {"migration_id": migration_id, "uuid": meta.get("fleetflow_instance"),
            "kind": kind, "source": source, "destination": destination, "status": status,
            "error": error, "code": MoveFailed.code if error else None,
            "started_at": None, "ends_at": None}
