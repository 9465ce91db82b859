"""Virtual clusters as tenants ask for them: validate, write the rows, post the flow.

The API and the CLI call :class:`VClusterOps` (API service ``vclusters``). A
request is checked against the cloud (flavors, images, volume types, the
groupings' contradictions, quotas) before anything is written; then the
cluster's rows and the run's flow are written and posted, and the call
returns without waiting. One run at a time per cluster: a change asked
while a run is going is 409.

Requests arrive as the API's schemas load them::

    {"name": "db", "instances": [{"name": "db-server-1", "type": "server",
                                  "spec": {"imageRef": "cirros", "flavorRef": "1"}},
                                 {"name": "db-vol-1", "type": "volume",
                                  "spec": {"size": 10, "volume_type": "ssd"}}],
     "groupings": [{"name": "group-1", "membersRef": ["db-server-1", "db-vol-1"],
                    "spec": {"rule": "affinity"}}]}
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import sqlalchemy as sa

from fleetflow.common import ids, states
from fleetflow.common.exceptions import Conflict, InvalidInput, NotFound
from fleetflow.flows import keys
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import intents
from fleetflow.persistence import queue as queue_rows
from fleetflow.persistence import reservations as quota_rows
from fleetflow.persistence import vclusters as rows
from fleetflow.persistence.models import StorageBackend, VCluster
from fleetflow.plugin.flow_meta import ON_ERROR_PAUSE, ON_ERROR_REVERT
from fleetflow.scheduler.vcluster import plan as vcluster_plan
from fleetflow.scheduler.vcluster.place import VolumeMember, check_groupings
from fleetflow.services import vcluster_views as views
from fleetflow.services import volumes as volumes_service
from fleetflow.services.final_progress import FinalProgress
from fleetflow.services.queue import limits as queue_limits
from fleetflow.services.reservations import resolve_flavor, resolve_image

LOG = logging.getLogger(__name__)

BUILD, TEARDOWN = "vcluster-build", "vcluster-teardown"
SERVER, VOLUME = states.MEMBER_SERVER, states.MEMBER_VOLUME
#: Statuses a cluster can be deleted from.
DELETABLE = (states.ACTIVE, states.ERROR, states.REVERTED, states.PAUSED)

Submitter = Callable[..., str]


@dataclasses.dataclass
class VClusterRequest:
    """A cluster body as the API's schema loaded it (this checks it against the cloud)."""

    tenant_id: str
    user_id: str | None
    name: str
    instances: list[dict]
    groupings: list[dict] = dataclasses.field(default_factory=list)
    # Not fitting now: fail (its build reverts, NO_VALID_HOST) or wait in the queue.
    when_full: str = states.WHEN_FULL_FAIL
    queue_timeout: float | None = None
    priority: int = 0


@dataclasses.dataclass
class _Checked:
    """A validated set of new members: rows to write and the scheduler's view of them."""

    servers: list[dict]
    volumes: list[dict]
    groupings: list[dict]
    cluster: vcluster_plan.ClusterInput


def normalise_groupings(groupings: list[dict]) -> list[dict]:
    return [{"name": g["name"], "rule": g["spec"]["rule"], "scope": g["spec"].get("scope"),
             "members": list(g["membersRef"])} for g in groupings]


class VClusterOps:
    """Entry points of virtual clusters; one per process."""

    def __init__(self, conf, database, submit: Submitter):
        self.conf = conf
        self.database = database
        self.submit = intents.joining(submit)
        # The list's DELETED clusters, counted once (services/final_progress.py).
        self._final_progress = FinalProgress()

    # -- validation ----------------------------------------------------------------

    def _check(self, session, tenant_id: str, instances: list[dict], groupings: list[dict],
               existing: vcluster_plan.ClusterInput | None = None,
               limits_only: bool = False) -> _Checked:
        """Resolve the new members, check every grouping (old and new) and the quotas.

        ``limits_only``: a queued cluster is checked against the limits alone;
        what the project uses is checked at admission (docs/queue.md).
        """
        existing = existing or vcluster_plan.ClusterInput([], [], [])
        taken = {m.name for m in [*existing.servers, *existing.volumes]}
        servers, volumes, asked = [], [], {"instances": 0, "vcpus": 0, "ram_mb": 0}
        types = self._volume_types(session)
        flavors, images = {}, {}
        cluster = vcluster_plan.ClusterInput(list(existing.servers), list(existing.volumes), [],
                                      dict(existing.pinned_hosts),
                                      dict(existing.pinned_backends))
        for item in instances:
            name, spec = item["name"], item["spec"]
            if name in taken:
                raise InvalidInput(f"instances: duplicate member name {name!r}",
                                   field="instances")
            taken.add(name)
            if item["type"] == SERVER:
                # Members mostly share a flavor and an image: each is read once.
                flavor = flavors.get(spec["flavorRef"])
                if flavor is None:
                    flavor = flavors[spec["flavorRef"]] = resolve_flavor(session,
                                                                         spec["flavorRef"])
                image = images.get(spec["imageRef"])
                if image is None:
                    image = images[spec["imageRef"]] = resolve_image(session, spec["imageRef"])
                cluster.servers.append(vcluster_plan.server_member(name, flavor,
                                                            spec.get("capabilities")))
                servers.append({"name": name, "flavor_id": flavor.id, "image_id": image.id,
                                "resources": dict(flavor.resources), "spec": dict(spec)})
                asked["instances"] += 1
                asked["vcpus"] += flavor.vcpus
                asked["ram_mb"] += flavor.ram_mb
            else:
                volumes_service.refuse_in_openstack_mode(self.conf, "instances")
                volume_type = spec.get("volume_type") or None
                if volume_type is not None and volume_type not in types:
                    raise InvalidInput(f"volume {name}: no storage backend offers volume type "
                                       f"{volume_type!r} (offered: {', '.join(sorted(types))})",
                                       field="instances")
                cluster.volumes.append(VolumeMember(name=name, size_gb=int(spec["size"]),
                                                    volume_type=volume_type,
                                                    attach_to=spec.get("attachTo")))
                volumes.append({"name": name, "size_gb": int(spec["size"]),
                                "volume_type": volume_type, "attach_to": spec.get("attachTo"),
                                "spec": dict(spec)})
        cluster.groupings = [vcluster_plan.grouping_of(g) for g in groupings]
        check_groupings(cluster.servers, cluster.volumes, cluster.groupings)
        limit = self.conf.api.max_reservation_count
        if len(cluster.servers) > limit or len(cluster.volumes) > limit:
            raise InvalidInput(f"instances: at most {limit} servers and {limit} volumes per "
                               "vcluster", field="instances")
        quota_rows.check_instance_quota(session, tenant_id, asked, self.conf.quota,
                                        limits_only)
        quota_rows.check_volume_quota(session, tenant_id, len(volumes),
                                      sum(v["size_gb"] for v in volumes), self.conf.quota,
                                      limits_only)
        return _Checked(servers, volumes, groupings, cluster)

    @staticmethod
    def _volume_types(session) -> set[str]:
        found: set[str] = set()
        for types in session.scalars(sa.select(StorageBackend.volume_types)):
            found.update(types or ())
        return found

    # -- create --------------------------------------------------------------------

    def create(self, req: VClusterRequest, idempotency_key: str | None = None
               ) -> tuple[VCluster, bool]:
        """Write the cluster and post its build; ``(cluster, created)``.

        With an ``idempotency_key`` this tenant used before: the first cluster
        and False (the caller compares ``cluster.request`` with the new body).
        """
        body = {"name": req.name, "instances": req.instances, "groupings": req.groupings,
                "when_full": req.when_full, "queue_timeout": req.queue_timeout,
                "priority": req.priority}
        queued = req.when_full == states.WHEN_FULL_QUEUE
        with self.database.session() as session:
            if idempotency_key:
                found = rows.find_by_idempotency_key(session, req.tenant_id, idempotency_key)
                if found is not None:
                    return found, False
            queue_limits.check(self.conf, req)
            checked = self._check(session, req.tenant_id, req.instances,
                                  normalise_groupings(req.groupings), limits_only=queued)
            vcluster = VCluster(id=rows.new_id(), tenant_id=req.tenant_id, user_id=req.user_id,
                                name=req.name, status=states.QUEUED if queued else states.PENDING,
                                request=body, runs=[], idempotency_key=idempotency_key)
            session.add(vcluster)
            session.flush()
            if queued:
                # Its members are written at admission: a queued cluster holds nothing.
                queue_rows.add(session, queue_rows.KIND_VCLUSTER, vcluster.id, req.tenant_id,
                               req.priority,
                               req.queue_timeout or self.conf.queue.default_timeout or None)
                return vcluster, True
            self._build(session, vcluster, checked)
        return vcluster, True

    def _build(self, session, vcluster: VCluster, checked: _Checked) -> None:
        """Write the members of a new cluster and post its build, in ``session``'s transaction."""
        flow_id = ids.new_uuid()
        servers, volumes = self._write_members(session, vcluster, checked, flow_id)
        rows.record_run(vcluster, flow_id, states.RUN_CREATE)
        self._post(session, BUILD, vcluster, states.RUN_CREATE, flow_id, servers, volumes)

    def admit(self, session, vcluster_id: str) -> bool:
        """Build a queued cluster as a fitting one is built: False if it is no longer QUEUED.

        The project's quotas are checked now, against what it uses now
        (QuotaExceeded: it stays queued); rows, status and the build's intent
        commit with the caller's transaction.
        """
        vcluster = rows.get(session, vcluster_id)
        if vcluster.status != states.QUEUED:
            return False
        body = vcluster.request
        checked = self._check(session, vcluster.tenant_id, body["instances"],
                              normalise_groupings(body.get("groupings") or []))
        if not queue_rows.move_status(session, queue_rows.KIND_VCLUSTER, vcluster_id,
                                      states.QUEUED, states.PENDING):
            return False
        session.refresh(vcluster)
        self._build(session, vcluster, checked)
        return True

    def _write_members(self, session, vcluster: VCluster, checked: _Checked, flow_id: str,
                       groupings: list[dict] | None = None) -> tuple[list, list]:
        added = rows.add_members(session, vcluster, checked.servers, checked.volumes, flow_id)
        server_names = {s.name for s in checked.cluster.servers}
        rows.set_groupings(session, vcluster, groupings or checked.groupings, server_names)
        by_name = {s["name"]: s for s in checked.servers}
        servers = [{"index": index, "name": name, "id": resource_id,
                    "resources": by_name[name]["resources"],
                    "image_id": by_name[name]["image_id"]}
                   for index, name, resource_id in added[SERVER]]
        sizes = {v["name"]: v for v in checked.volumes}
        volumes = [{"index": index, "name": name, "id": resource_id,
                    "size_gb": sizes[name]["size_gb"], "volume_type": sizes[name]["volume_type"]}
                   for index, name, resource_id in added[VOLUME]]
        return servers, volumes

    def _post(self, session, flow_name: str, vcluster: VCluster, run: str, flow_id: str,
              servers: list, volumes: list) -> None:
        """Submit a run in ``session``'s transaction: posted once the rows commit."""
        on_error = ON_ERROR_PAUSE if flow_name == TEARDOWN else ON_ERROR_REVERT
        args = {"vcluster_id": vcluster.id, "run": run, "servers": servers, "volumes": volumes}
        per_atom = self.conf.conductor.instances_per_atom
        if len(servers) + len(volumes) > per_atom:
            # Members in groups (flows/vcluster/batch.py, teardown.py): atoms a
            # member cost the engine about as much as the members' own work.
            args["batch"] = per_atom
        self.submit(flow_name, args,
                    store={keys.VCLUSTER_ID: vcluster.id, keys.TENANT_ID: vcluster.tenant_id,
                           keys.VCLUSTER_RUN: run, keys.FLOW_ID: flow_id},
                    tenant_id=vcluster.tenant_id, flow_id=flow_id, on_error=on_error,
                    session=session)

    def dry_run(self, req: VClusterRequest) -> dict:
        """Whether the cluster fits now and where each member would go; claims nothing."""
        from fleetflow.persistence.placement import allocations

        with self.database.session() as session:
            checked = self._check(session, req.tenant_id, req.instances,
                                  normalise_groupings(req.groupings))
            usage = allocations.usages_by_provider(session)
            placement = vcluster_plan.place(session, checked.cluster, usage, self.conf)
            return views.dry_run_view(session, checked, placement)

    # -- update ----------------------------------------------------------------------

    def add(self, tenant_id: str | None, vcluster_id: str, instances: list[dict],
            groupings: list[dict]) -> VCluster:
        """Add members (and groupings, or members to existing groupings): one update run."""
        with self.database.session() as session:
            vcluster = rows.get(session, vcluster_id, tenant_id)
            self._settled(vcluster)
            before = rows.grouping_dicts(rows.groupings(session, vcluster.id))
            merged = _merge_groupings(before, normalise_groupings(groupings))
            existing = vcluster_plan.cluster_input(session, vcluster.id, adding={})
            checked = self._check(session, vcluster.tenant_id, instances, merged, existing)
            rows.take(session, vcluster, states.UPDATING, (states.ACTIVE,))
            flow_id = ids.new_uuid()
            servers, volumes = self._write_members(session, vcluster, checked, flow_id, merged)
            rows.record_run(vcluster, flow_id, states.RUN_ADD, groupings_before=before,
                            added=[i["name"] for i in instances])
            self._post(session, BUILD, vcluster, states.RUN_ADD, flow_id, servers, volumes)
        return vcluster

    def remove(self, tenant_id: str | None, vcluster_id: str, name: str) -> VCluster:
        """Take one member out (its volume detached first; groupings lose it)."""
        with self.database.session() as session:
            vcluster = rows.get(session, vcluster_id, tenant_id)
            member = next((m for m in rows.members(session, vcluster.id) if m.name == name),
                          None)
            if member is None:
                raise NotFound(f"vcluster {vcluster_id} has no member {name!r}")
            self._settled(vcluster)
            rows.take(session, vcluster, states.UPDATING, (states.ACTIVE,))
            if member.kind == SERVER:
                evac_rows.hold_for_delete(session, [member.resource_id])
            member.removing = True
            flow_id = ids.new_uuid()
            rows.record_run(vcluster, flow_id, states.RUN_REMOVE, removed=[name])
            leaving = {"index": member.index, "id": member.resource_id}
            servers, volumes = ([leaving], []) if member.kind == SERVER else ([], [leaving])
            self._post(session, TEARDOWN, vcluster, states.RUN_REMOVE, flow_id, servers,
                       volumes)
        return vcluster

    @staticmethod
    def _settled(vcluster: VCluster) -> None:
        if vcluster.status != states.ACTIVE:
            raise Conflict(f"vcluster {vcluster.id} is {vcluster.status}; it can change once "
                           "it is ACTIVE", vcluster_id=vcluster.id, status=vcluster.status)

    def rename(self, tenant_id: str | None, vcluster_id: str, name: str) -> VCluster:
        with self.database.session() as session:
            vcluster = rows.get(session, vcluster_id, tenant_id)
            if vcluster.status == states.DELETED:
                raise NotFound(f"vcluster {vcluster_id} not found")
            vcluster.name = name
        return vcluster

    # -- delete ----------------------------------------------------------------------

    def delete(self, tenant_id: str | None, vcluster_id: str) -> VCluster:
        """Tear the whole cluster down (idempotent: a deleting cluster is answered as is)."""
        with self.database.session() as session:
            vcluster = rows.get(session, vcluster_id, tenant_id)
            if vcluster.status in (states.DELETING, states.DELETED):
                return vcluster
            # Never built: nothing to tear down. Loses to an admitter that built it meanwhile.
            for waiting in (states.QUEUED, states.EXPIRED):
                if queue_rows.move_status(session, queue_rows.KIND_VCLUSTER, vcluster_id,
                                          waiting, states.DELETED):
                    queue_rows.remove(session, queue_rows.KIND_VCLUSTER, [vcluster_id])
                    session.refresh(vcluster)
                    return vcluster
            rows.take(session, vcluster, states.DELETING, DELETABLE)
            members = rows.members(session, vcluster.id)
            flow_id = ids.new_uuid()
            rows.record_run(vcluster, flow_id, states.RUN_DELETE)
            servers = [{"index": m.index, "id": m.resource_id} for m in members
                       if m.kind == SERVER]
            volumes = [{"index": m.index, "id": m.resource_id} for m in members
                       if m.kind == VOLUME]
            evac_rows.hold_for_delete(session, [s["id"] for s in servers])
            self._post(session, TEARDOWN, vcluster, states.RUN_DELETE, flow_id, servers,
                       volumes)
        return vcluster

    # -- reading ---------------------------------------------------------------------

    def show(self, tenant_id: str | None, vcluster_id: str) -> dict:
        with self.database.session() as session:
            return views.show(session, rows.get(session, vcluster_id, tenant_id))

    def list(self, tenant_id: str | None, status: str | None = None, limit: int = 100,
             marker: str | None = None) -> list[dict]:
        # A read: clients poll the list while clusters build, and must not queue
        # behind (nor hold back) their writes.
        with self.database.read_session() as session:
            return views.summaries(session, tenant_id, status, limit, marker,
                                   self._final_progress)


def _merge_groupings(before: list[dict], new: list[dict]) -> list[dict]:
    """``before`` with ``new`` appended; a new grouping of a known name extends its members."""
    merged = [dict(g, members=list(g["members"])) for g in before]
    by_name = {g["name"]: g for g in merged}
    for grouping in new:
        known = by_name.get(grouping["name"])
        if known is None:
            merged.append(grouping)
            by_name[grouping["name"]] = grouping
            continue
        if grouping["rule"] != known["rule"] or grouping["scope"] not in (None, known["scope"]):
            raise InvalidInput(f"grouping {grouping['name']}: exists with rule "
                               f"{known['rule']} and scope {known['scope'] or 'default'}; an "
                               "update may only add members to it", field="groupings")
        known["members"] += [m for m in grouping["members"] if m not in known["members"]]
    return merged
