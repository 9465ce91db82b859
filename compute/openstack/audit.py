"""What the cloud's own Nova and Placement say about fleetflow's servers.

The simulated cloud's allocations are fleetflow's own ledger, which the audit
reads directly. In openstack mode Nova writes the allocations of its servers
in the cloud's Placement, so that is where a double allocation or one left
behind by a finished migration would be; and Nova's server groups are where a
member could be missing. Each finding is ``(kind, subject, detail, host)``.
"""

from __future__ import annotations

from fleetflow.compute.openstack import groups as nova_groups
from fleetflow.compute.openstack.nova import host_of

PLACEMENT_MICROVERSION = "1.28"

KINDS = {
    "cloud_double_allocation": "a fleetflow server holds resources on more than one of the "
                               "cloud's providers outside a move",
    "cloud_allocation_on_wrong_host": "a fleetflow server's allocation in the cloud's "
                                      "Placement is not on its host's provider",
    "cloud_missing_allocation": "a fleetflow server holds nothing in the cloud's Placement",
    "cloud_migration_allocation": "a finished migration still holds resources in the "
                                  "cloud's Placement",
    "cloud_duplicate_server": "Nova has more than one server for one fleetflow instance",
    "cloud_missing_group_member": "a fleetflow group member is not in its Nova server group",
}

# Nova's migration statuses after which the migration holds nothing.
_FINISHED = {"completed", "confirmed", "done", "error", "failed", "cancelled", "reverted"}


def check(nova, instances: dict[str, str], members: dict[str, set[str]]) -> list[tuple]:
    """Compare ``instances`` (settled fleetflow instance uuid -> host) and ``members``
    (fleetflow group id -> its settled instance uuids) with the cloud."""
    found: list[tuple] = []
    placement = nova.connection.placement
    providers = _providers(nova)
    servers_of: dict[str, list[dict]] = {}
    for server in _fleetflow_servers(nova):
        uuid = (server.get("metadata") or {}).get("fleetflow_instance")
        servers_of.setdefault(uuid, []).append(server)
    server_ids = {}
    for uuid, host in instances.items():
        servers = servers_of.get(uuid, [])
        if len(servers) > 1:
            found.append(("cloud_duplicate_server", uuid,
                          f"servers {', '.join(s['id'] for s in servers)}", host))
        if not servers:
            continue  # the audit's missing_guest says it
        server = servers[0]
        server_ids[uuid] = server["id"]
        if server.get("OS-EXT-STS:task_state"):
            continue  # a move or a delete is Nova's to finish
        held = _allocations(placement, server["id"])
        where = sorted(providers.get(rp, rp) for rp in held)
        if not held:
            found.append(("cloud_missing_allocation", uuid,
                          f"server {server['id']} holds nothing", host))
        elif len(held) > 1 and server.get("status") != "VERIFY_RESIZE":
            found.append(("cloud_double_allocation", uuid,
                          f"server {server['id']} holds on {', '.join(where)}", host))
        elif where != [host_of(server)]:
            found.append(("cloud_allocation_on_wrong_host", uuid,
                          f"server {server['id']} runs on {host_of(server)} and holds on "
                          f"{', '.join(where)}", host))
        for migration in nova.migrations(server["id"]):
            if migration["status"] in _FINISHED and migration.get("uuid") and _allocations(
                    placement, migration["uuid"]):
                found.append(("cloud_migration_allocation", uuid,
                              f"migration {migration['uuid']} ({migration['status']}) still "
                              "holds resources", migration.get("source_compute")))
    by_name = {g["name"]: g for g in nova.server_groups()}
    for group_id, uuids in members.items():
        group = by_name.get(nova_groups.PREFIX + group_id)
        if group is None:
            continue  # a policy Nova has no equivalent for: fleetflow alone keeps it
        in_nova = set(group.get("members") or [])
        for uuid in sorted(uuids):
            if uuid in server_ids and server_ids[uuid] not in in_nova:
                found.append(("cloud_missing_group_member", uuid,
                              f"server {server_ids[uuid]} is not in Nova server group "
                              f"{group['id']}", instances.get(uuid)))
    return found


def _fleetflow_servers(nova) -> list[dict]:
    return [s for s in nova.servers() if (s.get("metadata") or {}).get("fleetflow_instance")]


def _providers(nova) -> dict[str, str]:
    """The cloud's compute node providers by uuid -> their host's name."""
    response = nova.connection.placement.get("/resource_providers",
                                             microversion=PLACEMENT_MICROVERSION)
    found = {}
    hypervisors = nova.hypervisors()
    by_node = {h["id"]: (h.get("service") or {}).get("host") for h in hypervisors}
    for rp in response.json()["resource_providers"]:
        found[rp["uuid"]] = by_node.get(rp["uuid"]) or rp["name"]
    return found


def _allocations(placement, consumer: str) -> dict:
    response = placement.get(f"/allocations/{consumer}", microversion=PLACEMENT_MICROVERSION)
    return response.json().get("allocations", {}) if response.status_code == 200 else {}
