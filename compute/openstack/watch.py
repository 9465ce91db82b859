"""Servers by tag, read for every waiting task at once.

Each build and each move under way is polled by a task of its own every
``[openstack] poll_interval``. Asked one server at a time, a reservation of 100
or an evacuation of 40 is 100 or 40 reads of Nova per interval, which on a busy
cloud slows the very builds and moves being waited for. The watch answers every
task from one listing of the servers that carry any of the tags asked about
recently (``tags-any``, in chunks), taken at most once per interval.

An answer may be up to one interval old: a task that changed a server itself
(created it, asked Nova to move it) waits an interval before it asks, so the
listing it is answered from was taken after its change. Decisions that must
not act on an old answer (confirming, undoing) read the server directly.
"""

from __future__ import annotations

import threading
import time

#: Tags per listing: ``tags-any`` goes in the query string (about 60 bytes a tag).
CHUNK = 40
#: A tag nobody asked about for this many intervals (a task waiting on it asks every
#: interval) is no longer listed, so servers already built or moved drop out of the
#: listing; never sooner than FORGET_SECONDS.
FORGET_INTERVALS = 4
FORGET_SECONDS = 5.0


class Watch:
    def __init__(self, nova, interval: float):
        self.nova = nova
        self.interval = interval
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()
        self._asked: dict[str, float] = {}
        self._found: dict[str, list[dict]] = {}
        self._covered: frozenset[str] = frozenset()
        self._taken = float("-inf")

    def servers(self, tag: str) -> list[dict]:
        """The servers carrying ``tag``, as a listing at most one interval old saw them."""
        with self._lock:
            self._asked[tag] = time.monotonic()
            answer = self._cached(tag)
        if answer is not None:
            return answer
        with self._refreshing:
            # Another task may have listed while this one waited for the lock.
            with self._lock:
                answer = self._cached(tag)
                if answer is not None:
                    return answer
                now = time.monotonic()
                keep = max(FORGET_INTERVALS * self.interval, FORGET_SECONDS)
                tags = [t for t, at in self._asked.items() if now - at < keep]
                self._asked = {t: self._asked[t] for t in tags}
            found = self._list(tags)
            with self._lock:
                self._found, self._covered, self._taken = found, frozenset(tags), now
                return list(found.get(tag, ()))

    def _cached(self, tag: str) -> list[dict] | None:
        if tag in self._covered and time.monotonic() - self._taken < self.interval:
            return list(self._found.get(tag, ()))
        return None

    def _list(self, tags: list[str]) -> dict[str, list[dict]]:
        found: dict[str, list[dict]] = {}
        for start in range(0, len(tags), CHUNK):
            chunk = set(tags[start:start + CHUNK])
            for server in self.nova.servers(**{"tags-any": ",".join(sorted(chunk))}):
                for tag in chunk.intersection(server.get("tags") or ()):
                    found.setdefault(tag, []).append(server)
        return found
