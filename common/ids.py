"""Identifiers. A reservation id is never an instance id.

See docs/origins.md, "Reservations of N instances".
"""

import uuid

RESERVATION_PREFIX = "r-"


def new_uuid() -> str:
    return str(uuid.uuid4())


def new_reservation_id() -> str:
    return RESERVATION_PREFIX + uuid.uuid4().hex[:12]


def is_uuid(value) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
