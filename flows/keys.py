"""Every name a flow puts into, or reads from, TaskFlow's store: named once, here.

Tasks declare these in ``default_provides`` / ``requires`` / ``rebind``;
per-instance subflows scope them with :func:`scoped` so instance 3's ``host``
never collides with instance 4's. ``tests/unit/engine/test_keys.py`` checks that
no two constants share a value (Octavia ended up with ``LOADBALANCER_ID`` and
``LOAD_BALANCER_ID`` naming one thing twice).
"""

from __future__ import annotations

# -- Injected by the engine layer, never provided by a task ------------------
#: The fencing token of the conductor running the flow: ``{"key", "token"}``.
#: A new one is injected each time a conductor takes the job; every side
#: effect hands it on so a stale owner's writes are refused.
FENCE = "fence"
#: The operation id (flow detail uuid = logbook uuid = job name).
FLOW_ID = "flow_id"
#: Tenant that submitted the operation (None for operator actions).
TENANT_ID = "tenant_id"

# -- Request data, injected at submit time ----------------------------------
RESERVATION_ID = "reservation_id"
REQUEST_SPEC = "request_spec"
INSTANCE_UUIDS = "instance_uuids"
VCLUSTER_ID = "vcluster_id"
EVACUATION_ID = "evacuation_id"

# -- Provided by tasks -------------------------------------------------------
#: Output of scheduling: per instance its primary host and alternates.
PLACEMENTS = "placements"
#: Indexes of the instances whose primary host the all-or-nothing fast path
#: claimed in one write (their own claim task then has nothing to do).
PRIMARIES_CLAIMED = "primaries_claimed"
#: The host chosen for one instance (scoped per instance).
HOST = "host"
#: The migration id of one server's current try at a move (scoped per server).
MIGRATION = "migration"
#: Output of an evacuation's scheduling: per server its destination candidates.
MOVE_PLACEMENTS = "move_placements"
#: Indexes of the servers whose primary destination the evacuation's fast
#: path claimed in one write (their own claim task then has nothing to do).
PRIMARY_MOVES_CLAIMED = "primary_moves_claimed"
#: Output of a vcluster's joint scheduling: every new member's candidates,
#: the attachments and the providers' uuids (see flows/vcluster/build_tasks.py).
VCLUSTER_PLACEMENT = "vcluster_placement"
#: The backend chosen for one volume (scoped per volume).
BACKEND = "backend"
#: What a vcluster flow run does: create, add, remove or delete.
VCLUSTER_RUN = "vcluster_run"

# Separator between a scope and a key: ``inst-0003.host``. A dot never
# appears in a bare key, so a scoped key can always be split back.
SCOPE_SEP = "."


def scoped(prefix: str, key: str) -> str:
    """The name of ``key`` inside the scope ``prefix`` (``inst-0003.host``)."""
    if not prefix:
        raise ValueError("a scope prefix must not be empty")
    if SCOPE_SEP in key:
        raise ValueError(f"key {key!r} is already scoped")
    return f"{prefix}{SCOPE_SEP}{key}"


def all_keys() -> dict[str, str]:
    """Every key constant of this module, by constant name."""
    return {name: value for name, value in globals().items()
            if name.isupper() and isinstance(value, str) and name != "SCOPE_SEP"}
