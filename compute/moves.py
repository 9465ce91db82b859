"""The words of a move between hosts, as the hosts report it (``start_move`` / ``get_move``).

A move record is ``{"migration_id", "uuid", "kind", "source", "destination",
"status", "error", "code", "started_at", "ends_at"}``. Kept apart from the
driver so that tasks can name them without importing a simulated hypervisor.
"""

from __future__ import annotations

from fleetflow.common import states

# The kinds are the evacuation modes' words, so a move row's mode is the kind.
REBUILD = states.MODE_REBUILD
LIVE = states.MODE_LIVE
COLD = states.MODE_COLD
KINDS = (REBUILD, LIVE, COLD)

QUEUED = "queued"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
CONFIRMED = "confirmed"
REVERTED = "reverted"
STATUSES = (QUEUED, RUNNING, COMPLETED, FAILED, CONFIRMED, REVERTED)
#: Nothing happens to a move in one of these any more without being asked.
SETTLED = frozenset({COMPLETED, FAILED, CONFIRMED, REVERTED})
#: A move in one of these is still on its way: poll it again.
UNDER_WAY = frozenset({QUEUED, RUNNING})

# Guest states a move creates on the hosts.
MIGRATING = "MIGRATING"  # the destination's incoming copy: it holds capacity, runs nothing
SHUTOFF = "SHUTOFF"  # a cold move's source copy, powered off until confirm or revert

RECORD_KEYS = ("migration_id", "uuid", "kind", "source", "destination", "status", "error",
               "code", "started_at", "ends_at")
