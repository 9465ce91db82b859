"""Whether a read gets by a writer: SQLite's write lock held while another thread reads."""

from __future__ import annotations

import threading
from collections.abc import Callable

# A reader queued behind the lock would wait SQLITE_BUSY_TIMEOUT_MS (30 s) for it.
PATIENCE_S = 10.0


def ends_while_locked(database, read: Callable[[], None]) -> bool:
    """Run ``read`` on another thread while this one holds ``database``'s write lock (a
    ``BEGIN IMMEDIATE`` transaction); True when it ended before the lock was let go."""
    reader = threading.Thread(target=read, daemon=True)
    with database.engine.begin():
        reader.start()
        reader.join(PATIENCE_S)
        ended = not reader.is_alive()
    reader.join()
    return ended
