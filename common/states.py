"""Status values shared by database rows and the API (upper case, as STYLE.md asks)."""

# Host states (lower case: they are operator-set states, as in the fleet file).
HOST_UP = "up"
HOST_DOWN = "down"
HOST_MAINTENANCE = "maintenance"
HOST_DISABLED = "disabled"
HOST_STATES = (HOST_UP, HOST_DOWN, HOST_MAINTENANCE, HOST_DISABLED)

# Reservations and instances.
PENDING = "PENDING"
SCHEDULING = "SCHEDULING"
BUILDING = "BUILDING"
ACTIVE = "ACTIVE"
PARTIAL = "PARTIAL"
ERROR = "ERROR"
REVERTING = "REVERTING"
REVERTED = "REVERTED"
DELETING = "DELETING"
DELETED = "DELETED"
PAUSED = "PAUSED"

RESERVATION_STATUSES = (PENDING, SCHEDULING, BUILDING, ACTIVE, PARTIAL, ERROR, REVERTING,
                        REVERTED, DELETING, DELETED, PAUSED)
# A reservation in one of these no longer changes by itself.
SETTLED = frozenset({ACTIVE, PARTIAL, ERROR, REVERTED, DELETED, PAUSED})

# Instance task states: what is being done to it right now (None when idle).
TASK_SCHEDULING = "scheduling"
TASK_CLAIMING = "claiming"
TASK_SPAWNING = "spawning"
TASK_ATTACHING = "attaching"
TASK_REVERTING = "reverting"
TASK_DELETING = "deleting"
TASK_MIGRATING = "migrating"
TASK_REBUILDING = "rebuilding"

# Volumes.
VOLUME_CREATING = "CREATING"
VOLUME_AVAILABLE = "AVAILABLE"
VOLUME_IN_USE = "IN-USE"
VOLUME_ERROR = "ERROR"
VOLUME_DELETED = "DELETED"

# Failure policies of a reservation.
ALL_OR_NOTHING = "all-or-nothing"
BEST_EFFORT = "best-effort"
FAILURE_POLICIES = (ALL_OR_NOTHING, BEST_EFFORT)
