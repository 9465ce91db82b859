"""Whether a failure means the database is out of reach for now, not a fault.

A request that fails so may well succeed in a few seconds: the API answers
503 with ``Retry-After`` rather than 500 (api/errors.py). Which errors those
are (a lost or refused connection, a retry window that closed on one, a
SQLite file that cannot be opened) is persistence's knowledge
(persistence/db_retry.py).
"""

from __future__ import annotations

from fleetflow.persistence import db_retry


def database_unreachable(error: BaseException) -> bool:
    """True when ``error`` says the database cannot serve at the moment."""
    return db_retry.is_unavailable(error)
