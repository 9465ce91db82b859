"""Status values shared by database rows and the API (upper case: docs/architecture.md)."""

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
# Waiting in the queue for capacity (nothing claimed), and out of patience.
QUEUED = "QUEUED"
EXPIRED = "EXPIRED"

RESERVATION_STATUSES = (QUEUED, PENDING, SCHEDULING, BUILDING, ACTIVE, PARTIAL, ERROR,
                        REVERTING, REVERTED, DELETING, DELETED, PAUSED, EXPIRED)
# A reservation in one of these no longer changes by itself.
SETTLED = frozenset({ACTIVE, PARTIAL, ERROR, REVERTED, DELETED, PAUSED, EXPIRED})

# What a request does when it does not fit now: fail (NO_VALID_HOST) or wait.
WHEN_FULL_FAIL = "fail"
WHEN_FULL_QUEUE = "queue"
WHEN_FULL_CHOICES = (WHEN_FULL_FAIL, WHEN_FULL_QUEUE)

#: An instance in one of these stays where it is until someone acts on it; any
#: other (PENDING, BUILDING, REVERTING, DELETING ...) is still being changed.
INSTANCE_SETTLED = frozenset({ACTIVE, ERROR, DELETED, REVERTED})

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

# Virtual clusters: the cluster's status; its members keep their own.
UPDATING = "UPDATING"
VCLUSTER_STATUSES = (QUEUED, PENDING, SCHEDULING, BUILDING, ACTIVE, UPDATING, ERROR,
                     REVERTING, REVERTED, DELETING, DELETED, PAUSED, EXPIRED)
#: A vcluster in one of these runs a flow: no other change is accepted meanwhile.
VCLUSTER_BUSY = frozenset({PENDING, SCHEDULING, BUILDING, UPDATING, REVERTING, DELETING})
MEMBER_SERVER = "server"
MEMBER_VOLUME = "volume"
MEMBER_KINDS = (MEMBER_SERVER, MEMBER_VOLUME)
# What a vcluster flow run does.
RUN_CREATE = "create"
RUN_ADD = "add"
RUN_REMOVE = "remove"
RUN_DELETE = "delete"

# Evacuations (host evacuation / drain).
RUNNING = "RUNNING"
DONE = "DONE"
FAILED = "FAILED"
EVACUATION_STATUSES = (PENDING, RUNNING, PAUSED, DONE, PARTIAL, FAILED, REVERTING, REVERTED)
#: An evacuation in one of these holds its hosts (one evacuation at a time per host).
EVACUATION_ACTIVE = frozenset({PENDING, RUNNING, PAUSED, REVERTING})
EVACUATION_SETTLED = frozenset({DONE, PARTIAL, FAILED, REVERTED})
# One server's move inside an evacuation.
MOVING = "MOVING"
SKIPPED = "SKIPPED"
MOVE_STATUSES = (PENDING, MOVING, DONE, FAILED, SKIPPED, REVERTED)
#: Moves an operator's resume or skip may still act on.
MOVE_UNFINISHED = frozenset({PENDING, FAILED})

# Evacuation modes, error policies and fallbacks (the API's words).
MODE_REBUILD = "rebuild"
MODE_LIVE = "live"
MODE_COLD = "cold"
MODE_DRAIN = "drain"
EVACUATION_MODES = (MODE_REBUILD, MODE_LIVE, MODE_COLD, MODE_DRAIN)
ON_ERROR_PAUSE = "pause"
ON_ERROR_CONTINUE = "continue"
ON_ERROR_REVERT = "revert"
EVACUATION_ON_ERROR = (ON_ERROR_PAUSE, ON_ERROR_CONTINUE, ON_ERROR_REVERT)
FALLBACK_NONE = "none"
FALLBACK_COLD = "cold"
EVACUATION_FALLBACKS = (FALLBACK_NONE, FALLBACK_COLD)

# Failure policies of a reservation.
ALL_OR_NOTHING = "all-or-nothing"
BEST_EFFORT = "best-effort"
FAILURE_POLICIES = (ALL_OR_NOTHING, BEST_EFFORT)
