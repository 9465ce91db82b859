"""The audit's look at automatic recovery: dead hosts the storm guard holds."""

from __future__ import annotations

from fleetflow.persistence import recoveries

KINDS = {
    "recovery_held": "a dead host is not recovered: the storm guard holds it (too many "
                     "hosts of its zone or of the fleet look dead at once); an operator "
                     "decides",
}


def check_held(add, database) -> dict:
    """One ``recovery_held`` per recovery the storm guard holds; ``{"recoveries_held": n}``."""
    with database.read_session() as session:
        held = recoveries.open_recoveries(session, (recoveries.HELD,))
        for recovery in held:
            add("recovery_held", recovery.id, recovery.detail or "held by the storm guard",
                recovery.host)
    return {"recoveries_held": len(held)}
