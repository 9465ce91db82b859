"""What an admission pass needs to know of each kind of queued request.

A reservation is N equal instances placed by the scheduler; a virtual cluster
is servers and volumes placed jointly so every grouping holds. Both are
placed on the pass's one snapshot, and what each takes is added to it so the
requests after it see less. ``place`` answers ``(taken, why)``: the hosts and
resources it would take, or None and the explanation a dry run would give.
"""

from __future__ import annotations

import collections
import dataclasses
import json

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import queue as queue_rows
from fleetflow.persistence import reservations as res_rows
from fleetflow.persistence.models import Flavor, Instance, Reservation, VCluster
from fleetflow.persistence.placement.models import Allocation
from fleetflow.scheduler import plan, scheduler
from fleetflow.scheduler.filters import run_filters
from fleetflow.scheduler.result import NoValidHost
from fleetflow.scheduler.snapshot import CloudSnapshot
from fleetflow.scheduler.vcluster import plan as vc_plan
from fleetflow.scheduler.vcluster.place import VolumeMember, place_vcluster

# Admitted, but whose flow may not have claimed everything yet.
UNCLAIMED = (states.PENDING, states.SCHEDULING, states.BUILDING)

Taken = list[tuple[str, dict]]  # (host, resources) per server


def _uses_hosts(session, spec: dict, snapshot) -> set[str]:
    req = dataclasses.replace(plan.request_spec(session, spec, []), resources={},
                              volume_gb=None)
    hosts, _ = run_filters(req, snapshot.hosts)
    return {h.name for h in hosts}


class ReservationKind:
    name = queue_rows.KIND_RESERVATION
    model = Reservation

    @staticmethod
    def spec(row) -> dict:
        return row.request["spec"]

    @staticmethod
    def storage(spec: dict) -> bool:
        return bool(spec.get("volume_gb"))

    @staticmethod
    def place(session, conf, spec: dict, snapshot, held: set[str]) -> tuple[Taken | None, str]:
        req = plan.request_spec(session, spec, [], excluded_hosts=sorted(held))
        try:
            placement = scheduler.schedule(req, snapshot, alternates=0,
                                           weigher=conf.scheduler.weigher)
        except NoValidHost as exc:
            return None, exc.message
        return [(p.host, req.resources) for p in placement.instances], ""

    @staticmethod
    def admit_args(taken: Taken) -> dict:
        """What ``ReservationOps.admit`` takes of the pass's placement: each instance's host."""
        return {"placed": [host for host, _resources in taken]}

    @staticmethod
    def usable_hosts(session, spec: dict, snapshot) -> set[str]:
        """Hosts the request could ever use: its filters, whatever their usage."""
        return _uses_hosts(session, spec, snapshot)

    @staticmethod
    def unclaimed(session, conf, row, snapshot, memo: dict) -> Taken | None:
        """What an admitted request will still claim; None once its flow is past claiming.

        ``memo``: where it was placed while as much was left to claim (its
        flow schedules for itself; this only keeps that much room aside).
        """
        if row.status not in UNCLAIMED:
            return None
        uuids = res_rows.instance_ids(session, row.id)
        claimed = set(session.scalars(sa.select(Allocation.consumer_uuid).distinct().where(
            Allocation.consumer_uuid.in_(uuids))))
        left = [u for u in uuids if u not in claimed]
        if not left:
            return None if row.status != states.PENDING else []
        placed = row.request.get("admitted_hosts")
        if placed:
            # Its flow claims where the pass placed it: what is left is those hosts
            # but the ones its claimed instances hold already.
            key = (queue_rows.KIND_RESERVATION, row.id, "resources")
            if key not in memo:
                memo[key] = plan.request_spec(session, row.request["spec"], left,
                                              count=len(left)).resources
            resources = memo[key]
            hosts = collections.Counter(placed)
            if claimed:
                hosts.subtract(session.scalars(sa.select(Instance.host).where(
                    Instance.id.in_(claimed))))
            return [(host, resources) for host in hosts.elements()]
        key = (queue_rows.KIND_RESERVATION, row.id, len(left))
        if key not in memo:
            req = plan.request_spec(session, row.request["spec"], left, count=len(left))
            req.min_count = 1
            try:
                placement = scheduler.schedule(req, snapshot, alternates=0,
                                               weigher=conf.scheduler.weigher)
                memo[key] = [(p.host, req.resources) for p in placement.instances]
            except NoValidHost:
                memo[key] = []
        return memo[key]


class VClusterKind:
    name = queue_rows.KIND_VCLUSTER
    model = VCluster

    @staticmethod
    def admit_args(taken: Taken) -> dict:
        # NOTE: a cluster's build places its members again (docs/queue.md, "Limits").
        return {}

    @staticmethod
    def spec(row) -> dict:
        return row.request

    @staticmethod
    def storage(spec: dict) -> bool:
        return False  # volumes are placed on the pass's backends (below)

    @staticmethod
    def _cluster(session, body: dict) -> vc_plan.ClusterInput:
        from fleetflow.services.vclusters import normalise_groupings

        servers, volumes = [], []
        flavors: dict[str, Flavor] = {}
        for item in body["instances"]:
            spec = item["spec"]
            if item["type"] == states.MEMBER_SERVER:
                ref = str(spec["flavorRef"])
                if ref not in flavors:
                    flavors[ref] = (session.get(Flavor, ref) or session.execute(
                        sa.select(Flavor).where(Flavor.name == ref)).scalar_one())
                servers.append(vc_plan.server_member(item["name"], flavors[ref],
                                                     spec.get("capabilities")))
            else:
                volumes.append(VolumeMember(name=item["name"], size_gb=int(spec["size"]),
                                            volume_type=spec.get("volume_type") or None,
                                            attach_to=spec.get("attachTo")))
        groupings = [vc_plan.grouping_of(g)
                     for g in normalise_groupings(body.get("groupings") or [])]
        return vc_plan.ClusterInput(servers, volumes, groupings)

    @classmethod
    def place(cls, session, conf, spec: dict, snapshot, held: set[str]
              ) -> tuple[Taken | None, str]:
        cluster = cls._cluster(session, spec)
        view = snapshot if not held else CloudSnapshot(
            [h for h in snapshot.hosts if h.name not in held], snapshot.backend_free)
        backends = _backends(session, snapshot)
        placement = place_vcluster(cluster.servers, cluster.volumes, cluster.groupings, view,
                                   backends, alternates=0, weigher=conf.scheduler.weigher)
        if not placement.fits:
            return None, placement.explanation or "does not fit"
        sizes = {v.name: v.size_gb for v in cluster.volumes}
        by_name = {b.name: b for b in backends}
        for volume, candidates in placement.backends.items():
            by_name[candidates[0]].used_gb += sizes[volume]
        return [(placement.hosts[s.name][0], dict(s.resources)) for s in cluster.servers], ""

    @classmethod
    def usable_hosts(cls, session, spec: dict, snapshot) -> set[str]:
        """Hosts any of its servers could ever use (their capabilities, usage aside)."""
        found: set[str] = set()
        for server in cls._cluster(session, spec).servers:
            found |= _uses_hosts(session, {"min_count": 1, "max_count": 1, "resources": {},
                                           "capabilities": server.capabilities}, snapshot)
        return found

    @classmethod
    def unclaimed(cls, session, conf, row, snapshot, memo: dict) -> Taken | None:
        """An admitted cluster whose build has not claimed yet takes its place (all of it)."""
        if row.status not in UNCLAIMED:
            return None
        members = [m.resource_id for m in row.members if m.kind == states.MEMBER_SERVER]
        if members and session.scalar(sa.select(sa.func.count()).select_from(Allocation)
                                      .where(Allocation.consumer_uuid.in_(members))):
            return None  # the build claims the cluster at once: all of it is counted
        key = (queue_rows.KIND_VCLUSTER, row.id)
        if key not in memo:
            memo[key] = cls.place(session, conf, row.request, snapshot, set())[0] or []
        return memo[key]


def _backends(session, snapshot) -> list:
    """The pass's storage backends, read once and then kept up to date as it places."""
    cached = getattr(snapshot, "queue_backends", None)
    if cached is None:
        from fleetflow.persistence.placement import allocations

        cached = vc_plan.backend_states(session, allocations.usages_by_provider(session))
        snapshot.queue_backends = cached
    return cached


KINDS = {k.name: k for k in (ReservationKind, VClusterKind)}


def refusal_key(kind, spec: dict, held: bool) -> tuple:
    """Equal requests get the same answer from one snapshot: one attempt answers for all."""
    return kind.name, json.dumps(spec, sort_keys=True, default=str), held
