"""The progress of operations that can no longer change, counted once per process.

A DELETED reservation or cluster has no member left to change, so its progress
is final: the lists count it the first time they show it and remember it, and a
project's deleted history does not weigh on every poll of its lists. What is
remembered is bounded (forgotten all at once past ``LIMIT``: counting again is
only slower, never wrong).
"""

from __future__ import annotations

from collections.abc import Iterable

LIMIT = 4096


class FinalProgress:
    """Progress by id, for ids whose operation is settled for good."""

    def __init__(self, limit: int = LIMIT):
        self._limit = limit
        self._known: dict[str, dict] = {}

    def known(self, ids: Iterable[str]) -> dict[str, dict]:
        """The remembered progress of those of ``ids`` counted before (copies)."""
        return {i: dict(self._known[i]) for i in ids if i in self._known}

    def remember(self, progress: dict[str, dict]) -> None:
        """Keep ``progress`` (by id): each must be final."""
        if len(self._known) + len(progress) > self._limit:
            self._known.clear()
        self._known.update((i, dict(p)) for i, p in progress.items())
