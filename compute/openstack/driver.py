"""The runtime's compute client in openstack mode: fleetflow's atoms acting on Nova.

It answers the calls the flows make of the simulated hosts' RPC client
(``ensure_built``, ``ensure_destroyed``, ``start_move``, ``get_move``, ...),
with the same guarantees:

- **Idempotent by fleetflow's ids.** A server fleetflow boots carries the tag
  ``fleetflow:<instance uuid>``; a build looks for it before creating, so a
  boot run again after a crash finds the server and never boots a second.
  One try at a move tags the server ``fleetflow-move:<migration id>`` before
  Nova is asked, and records which of Nova's migrations were there before,
  so a start sent again finds its move rather than starting another.
- **Nova owns the allocations.** Nova claims in the cloud's Placement when it
  builds or moves a server; fleetflow writes none there. fleetflow's own
  ledger (the one-pass scheduler's view, synced from the cloud) is where its
  claims are made, as in the simulated mode.
- **Hosts by Nova's service host name**, targeted with ``host`` (2.74 on
  create, 2.56 on migrate, os-migrateLive and evacuate): Nova validates the
  host and claims on it, so a host that cannot take the server fails the
  try and the flow's retry goes on to the instance's alternates.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from fleetflow.common import states
from fleetflow.compute import moves as mv
from fleetflow.compute.exceptions import (
    BuildFailed,
    HostDead,
    HostNotServed,
    InstanceNotFound,
    MoveFailed,
    OutcomeUnknown,
)
from fleetflow.compute.openstack import groups
from fleetflow.compute.openstack.moves import Moves
from fleetflow.compute.openstack.nova import (
    Nova,
    Refused,
    fault_of,
    host_of,
    instance_tag,
    task_state_of,
)
from fleetflow.compute.openstack.watch import Watch

LOG = logging.getLogger(__name__)


class VolumesUnsupported(Refused):
    """Volumes need Cinder, which fleetflow does not drive yet in openstack mode."""

    code = "fleetflow.openstack.volumes_unsupported"
    status = 400


def guest_of(server: dict, uuid: str) -> dict:
    """A Nova server as the flows read a guest."""
    return {"uuid": uuid, "host": host_of(server), "state": server.get("status"),
            "server_id": server["id"], "task_state": task_state_of(server)}


class OpenStackCompute:
    """What ``runtime.compute`` is when ``[cloud] driver = openstack``."""

    def __init__(self, conf, database, connection):
        self.conf = conf
        self.database = database
        self.nova = Nova(connection)
        self.watch = Watch(self.nova, conf.openstack.poll_interval)
        self.moves = Moves(self.nova, conf, self.watch)
        self._tenants: dict[str, Nova] = {}
        self._tenants_lock = threading.Lock()

    def _in_project(self, project_id: str) -> Nova:
        """Nova as fleetflow's user scoped to ``project_id``: a tenant's servers and
        server groups are made in the tenant's project (its quota, its ``openstack
        server list``). Everything else (finding, moving, deleting) is done with the
        cloud-wide identity. ``[openstack] tenant_projects = false``: all in fleetflow's
        own project."""
        if not self.conf.openstack.tenant_projects:
            return self.nova
        with self._tenants_lock:
            nova = self._tenants.get(project_id)
            if nova is None:
                connection = self.nova.connection.connect_as_project({"id": project_id})
                nova = self._tenants[project_id] = Nova(connection)
            return nova

    # -- finding fleetflow's servers -----------------------------------------

    def find(self, uuid: str) -> list[dict]:
        """Every Nova server tagged as fleetflow instance ``uuid`` (normally 0 or 1)."""
        return self.nova.tagged(instance_tag(uuid))

    def _instance(self, uuid: str):
        from fleetflow.persistence.models import Instance

        with self.database.session() as session:
            instance = session.get(Instance, uuid)
            if instance is None:
                raise InstanceNotFound(f"instance {uuid} is not fleetflow's", instance_id=uuid)
            session.expunge(instance)
            return instance

    # -- builds ----------------------------------------------------------------

    def ensure_built(self, host: str, uuid: str, resources: Mapping,
                     image: str | None = None, fence: Mapping | None = None,
                     timeout: float | None = None, attempts: int = 3) -> dict:
        """Boot instance ``uuid`` on ``host`` unless its server exists; wait for ACTIVE.

        A server of this instance on another host (a try whose undo a crash
        cut short) is deleted first: the claim is on ``host``. A server that
        goes ERROR is deleted and the build fails with Nova's fault, so the
        retry's next host starts clean.
        """
        for server in self.find(uuid):
            if host_of(server) == host and server["status"] != "ERROR":
                return self._wait_active(host, uuid, server)
            LOG.info("instance %s: removing its server %s (%s on %s) before building on %s",
                     uuid, server["id"], server["status"], host_of(server), host)
            self._delete_and_wait(server["id"])
        instance = self._instance(uuid)
        body = {"name": instance.name or f"fleetflow-{uuid[:8]}",
                "flavorRef": instance.flavor_id, "imageRef": image or instance.image_id,
                "networks": "none", "host": host, "tags": [instance_tag(uuid)],
                "metadata": {"fleetflow_instance": uuid,
                             "fleetflow_tenant": instance.tenant_id,
                             **({"fleetflow_reservation": instance.reservation_id}
                                if instance.reservation_id else {})}}
        hints = None
        tenant = self._in_project(instance.tenant_id)
        if instance.group_id:
            nova_group = groups.ensure(tenant, self.database, instance.group_id)
            if nova_group:
                hints = {"group": nova_group}
        try:
            server = tenant.create(body, hints)
        except Refused as exc:
            raise BuildFailed(f"{uuid} on {host}: Nova refused the build: {exc.message}",
                              host=host, instance_id=uuid) from exc
        return self._wait_active(host, uuid, server)

    def _wait_active(self, host: str, uuid: str, server: dict) -> dict:
        deadline = time.monotonic() + self.conf.openstack.build_timeout
        tag = instance_tag(uuid)
        while True:
            listed = [found for found in self.watch.servers(tag) if found["id"] == server["id"]]
            # Not in a listing taken before the server was made: asked directly.
            current = listed[0] if listed else self.nova.server(server["id"])
            if current is None:
                raise BuildFailed(f"{uuid} on {host}: its server {server['id']} was deleted "
                                  "while it was building", host=host, instance_id=uuid)
            if current["status"] == "ACTIVE" and task_state_of(current) is None:
                return guest_of(current, uuid)
            if current["status"] == "ERROR":
                message = fault_of(current)
                self._delete_and_wait(current["id"])
                raise BuildFailed(f"{uuid} on {host}: {message}", host=host, instance_id=uuid)
            if time.monotonic() > deadline:
                self._delete_and_wait(current["id"])
                raise BuildFailed(f"{uuid} on {host}: still {current['status']} after "
                                  f"{self.conf.openstack.build_timeout:.0f} s", host=host,
                                  instance_id=uuid)
            time.sleep(self.conf.openstack.poll_interval)

    def _delete_and_wait(self, server_id: str) -> None:
        self.nova.delete(server_id)
        deadline = time.monotonic() + self.conf.openstack.build_timeout
        while self.nova.server(server_id) is not None:
            if time.monotonic() > deadline:
                raise OutcomeUnknown(f"server {server_id} is still there after its delete")
            time.sleep(self.conf.openstack.poll_interval)

    def ensure_destroyed(self, host: str, uuid: str, fence: Mapping | None = None,
                         timeout: float | None = None, attempts: int = 3) -> dict:
        """Delete every server of instance ``uuid`` and wait until Nova has none."""
        servers = self.find(uuid)
        for server in servers:
            self._delete_and_wait(server["id"])
        return {"uuid": uuid, "host": host, "destroyed": bool(servers)}

    def get_instance(self, host: str, uuid: str, timeout: float | None = None) -> dict | None:
        for server in self.find(uuid):
            if host_of(server) == host:
                return guest_of(server, uuid)
        return None

    def list_instances(self, host: str, timeout: float | None = None) -> list[dict]:
        """fleetflow's servers that Nova has on ``host``."""
        found = []
        for server in self.nova.servers(host=host):
            uuid = (server.get("metadata") or {}).get("fleetflow_instance")
            if uuid:
                found.append(guest_of(server, uuid))
        return found

    # -- hosts -----------------------------------------------------------------

    def _service(self, host: str) -> dict:
        services = self.nova.compute_services(host)
        if not services:
            raise HostNotServed(f"Nova has no compute service on {host}", host=host)
        return services[0]

    def compute_services(self) -> list[dict]:
        """Every nova-compute service in one listing, normalized as the sync reads them
        (``inventory.services_from_nova``): the recovery monitor's heartbeats."""
        from fleetflow.compute.openstack import inventory

        return inventory.services_from_nova({"services": self.nova.compute_services()})

    def ping(self, host: str, timeout: float | None = None) -> dict:
        """The host's compute service is up and not forced down; HostDead otherwise."""
        service = self._service(host)
        if service.get("state") != "up" or service.get("forced_down"):
            raise HostDead(f"{host}: Nova's compute service is {service.get('state')}"
                           + (" (forced down)" if service.get("forced_down") else ""),
                           host=host)
        return {"host": host, "alive": True, "time": time.time(), "simulated": False}

    def close_host(self, host: str, mode: str, reason: str) -> None:
        """No new servers on ``host`` while it is evacuated; a rebuild fences it too.

        Fencing (forced down, then disabled) is what lets Nova evacuate its
        servers: Nova refuses to rebuild elsewhere the servers of a host it
        still thinks up. Idempotent: a service already so is left as it is.
        """
        service = self._service(host)
        if mode == states.MODE_REBUILD and not service.get("forced_down"):
            self.nova.update_service(service["id"], {"forced_down": True})
        if service.get("status") != "disabled":
            self.nova.update_service(service["id"], {"status": "disabled",
                                                     "disabled_reason": reason[:255]})

    def set_service_state(self, host: str, state: str, reason: str) -> None:
        """An operator's host state, said to Nova: ``up`` enables the service and lifts
        a forced down; ``down`` forces it down and disables it; ``maintenance`` and
        ``disabled`` disable it."""
        service = self._service(host)
        if state == states.HOST_UP:
            if service.get("forced_down"):
                self.nova.update_service(service["id"], {"forced_down": False})
            if service.get("status") != "enabled":
                self.nova.update_service(service["id"], {"status": "enabled"})
            return
        if state == states.HOST_DOWN and not service.get("forced_down"):
            self.nova.update_service(service["id"], {"forced_down": True})
        if service.get("status") != "disabled":
            self.nova.update_service(service["id"], {"status": "disabled",
                                                     "disabled_reason": reason[:255]})

    def audit_cloud(self, instances: Mapping, members: Mapping) -> list[tuple]:
        """What Nova and the cloud's Placement disagree on (see ``openstack.audit``)."""
        from fleetflow.compute.openstack import audit

        return audit.check(self.nova, dict(instances), dict(members))

    def set_faults(self, host: str, timeout: float | None = None, **faults) -> dict:
        raise Refused("faults are injected only into the simulated cloud "
                      "([cloud] driver = simulated)", host=host)

    # -- moves -----------------------------------------------------------------

    def start_move(self, host: str, migration_id: str, kind: str, uuid: str,
                   source_host: str, resources: Mapping, image: str | None = None,
                   fence: Mapping | None = None, timeout: float | None = None) -> dict:
        servers = self.find(uuid)
        if not servers:
            raise InstanceNotFound(f"instance {uuid} has no server in Nova", instance_id=uuid)
        return self.moves.start(servers[0], migration_id, kind, uuid, source_host, host)

    def get_move(self, host: str, migration_id: str,
                 timeout: float | None = None) -> dict | None:
        return self.moves.get(migration_id)

    def confirm_move(self, host: str, migration_id: str, fence: Mapping | None = None,
                     timeout: float | None = None) -> dict:
        record = self.moves.confirm(migration_id)
        if record is None:
            raise MoveFailed(f"move {migration_id} never started", host=host,
                             migration_id=migration_id)
        return record

    def revert_move(self, host: str, migration_id: str, fence: Mapping | None = None,
                    timeout: float | None = None) -> dict | None:
        return self.moves.revert(migration_id)

    # -- block storage: not in openstack mode ----------------------------------

    def _no_volumes(self, *args, **kwargs):
        raise VolumesUnsupported("volumes need Cinder, which fleetflow does not drive in "
                                 "openstack mode")

    create_volume = delete_volume = force_detach_volume = _no_volumes
    attach_volume = detach_volume = list_volumes = _no_volumes
    ensure_detached = ensure_volume_deleted = ensure_force_detached = _no_volumes


__all__ = ["OpenStackCompute", "VolumesUnsupported", "guest_of", "mv"]
