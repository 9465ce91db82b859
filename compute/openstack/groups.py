"""fleetflow's server groups backed by Nova server groups, so Nova enforces them too.

A fleetflow group gets the Nova server group named ``fleetflow-<group id>``,
made the first time one of its members boots, under the fleetflow group's
row lock (two conductors booting members at once make one). Nova has one
policy per group, at host scope; what fleetflow says more (rack or zone
scope, proximity, capabilities) its own scheduler and claim re-check keep:

- anti-affinity at any scope implies it per host (members in different racks
  are on different hosts); ``max_per_host`` becomes Nova's
  ``max_server_per_host`` rule;
- affinity only at host scope (a rack-affinity group spans hosts);
- soft-affinity and soft-anti-affinity map to Nova's own.
"""

from __future__ import annotations

import threading

from fleetflow.compute.openstack.nova import Nova

PREFIX = "fleetflow-"
_known: dict[str, str | None] = {}
_lock = threading.Lock()


def nova_policy(policies: list[str], scope: str, max_per_host: int | None) -> dict | None:
    """The Nova server group body for a fleetflow group, or None when Nova has no equivalent."""
    for policy in policies:
        if policy == "anti-affinity":
            body = {"policy": "anti-affinity"}
            if max_per_host and max_per_host > 1:
                body["rules"] = {"max_server_per_host": int(max_per_host)}
            return body
        if policy == "affinity" and scope == "host":
            return {"policy": "affinity"}
        if policy in ("soft-affinity", "soft-anti-affinity"):
            return {"policy": policy}
    return None


def ensure(nova: Nova, database, group_id: str) -> str | None:
    """The id of the Nova server group backing ``group_id`` (made if need be), or None."""
    with _lock:
        if group_id in _known:
            return _known[group_id]
    from fleetflow.persistence import groups

    name = PREFIX + group_id
    with database.session() as session:
        group = groups.lock(session, group_id)
        body = nova_policy(list(group.policies or []), group.scope, group.max_per_host)
        found = None
        if body is not None:
            found = next((g["id"] for g in nova.server_groups() if g["name"] == name), None)
            if found is None:
                found = nova.create_server_group({"name": name, **body})["id"]
    with _lock:
        _known[group_id] = found
    return found


def forget(group_id: str) -> None:
    with _lock:
        _known.pop(group_id, None)
