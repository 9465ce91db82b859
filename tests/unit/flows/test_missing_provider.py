"""A fleet host whose placement provider is gone: removed behind the API's back
(straight from the database), before the schedule or between the schedule and
the claim. The scheduler and the dry runs leave the host out, a claim on it is
lost like any other (the instance or the move goes to its next alternate), and
the audit reports the host.
"""

from __future__ import annotations

import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.flows.provision import schedule
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.fleet import stable_uuid
from fleetflow.persistence.placement.models import (
    Inventory,
    ProviderAggregate,
    ProviderTrait,
    ResourceProvider,
)
from fleetflow.scheduler.moves import plan as move_plan
from fleetflow.scheduler.vcluster import plan as vcluster_plan
from fleetflow.services.evacuations import EvacuationOps, EvacuationRequest
from fleetflow.services.reservations import ReservationOps, ReservationRequest
from fleetflow.services.vclusters import VClusterOps, VClusterRequest
from tests.unit.flows.test_evacuate_flow import SOURCE, allocations, boot

GONE = "z1-r1-h01"


def drop_provider(database, host: str) -> None:
    """Delete ``host``'s provider in SQL, as a careless operator or a bad script would."""
    with database.session() as session:
        drop_provider_in(session, host)


def drop_provider_in(session, host: str) -> None:
    rp = stable_uuid(host)
    # Its children (a host-local disk) become roots of their own.
    session.execute(sa.update(ResourceProvider)
                    .where(ResourceProvider.parent_provider_uuid == rp)
                    .values(parent_provider_uuid=None, root_provider_uuid=ResourceProvider.uuid))
    for table in (Inventory, ProviderTrait, ProviderAggregate):
        session.execute(sa.delete(table).where(table.resource_provider_uuid == rp))
    session.execute(sa.delete(ResourceProvider).where(ResourceProvider.uuid == rp))


def instances(cloud, rid) -> list:
    with cloud.database.session() as session:
        return [(i.host, i.status, i.hosts_tried) for i in rows.instances(session, rid)]


def reservation_status(cloud, rid) -> str:
    with cloud.database.session() as session:
        return rows.get(session, rid).status


def audit_kinds(cloud) -> list:
    from fleetflow.services.audit.report import audit

    report = audit(cloud.database, cloud.runtime.placement, cloud.runtime.compute,
                   strict=True)
    return [(m.kind, m.subject) for m in report.mismatches]


def request(count: int) -> ReservationRequest:
    return ReservationRequest(tenant_id="t1", user_id="u1", flavor_ref="m1.small",
                              image_ref="cirros", min_count=count, max_count=count)


def test_a_host_without_provider_takes_no_instance_and_the_dry_run_agrees(cloud):
    drop_provider(cloud.database, GONE)
    ops = ReservationOps(cloud.conf, cloud.database, submit=cloud.submit)
    # Six hosts of 4 VCPUs: without GONE's, 20 instances fit and 24 do not.
    assert ops.dry_run(request(24))["fits"] is False
    planned = ops.dry_run(request(20))
    assert planned["fits"] is True and GONE not in planned["hosts"]
    rid, job = cloud.reserve(20)
    assert cloud.run(job) == tf_states.SUCCESS
    assert reservation_status(cloud, rid) == states.ACTIVE
    placed = instances(cloud, rid)
    assert {status for _, status, _ in placed} == {states.ACTIVE}
    assert all(host != GONE and GONE not in tried for host, _, tried in placed)
    assert audit_kinds(cloud) == [("missing_provider", GONE)]


def test_a_provider_gone_between_schedule_and_claim_is_a_lost_claim(cloud, monkeypatch):
    place = schedule.place
    dropped = []

    def place_then_drop(spec, uuids, *args, **kwargs):
        result = place(spec, uuids, *args, **kwargs)
        if not dropped:
            # The first instance's primary vanishes before anything is claimed.
            dropped.append(result.instances[0].host)
            drop_provider(cloud.database, dropped[0])
        return result

    monkeypatch.setattr(schedule, "place", place_then_drop)
    rid, job = cloud.reserve(6)
    assert cloud.run(job) == tf_states.SUCCESS
    assert reservation_status(cloud, rid) == states.ACTIVE
    placed = instances(cloud, rid)
    assert {status for _, status, _ in placed} == {states.ACTIVE}
    # A lost claim records no attempt: the host was never reached.
    assert dropped and all(host != dropped[0] and dropped[0] not in tried
                           for host, _, tried in placed)
    assert audit_kinds(cloud) == [("missing_provider", dropped[0])]


def test_a_vcluster_member_whose_host_lost_its_provider_is_placed_again(cloud, monkeypatch):
    place = vcluster_plan.place
    dropped = []

    def place_then_drop(session, *args, **kwargs):
        result = place(session, *args, **kwargs)
        if not dropped:
            # In the schedule's own transaction (SQLite has one writer at a time).
            dropped.append(next(iter(result.hosts.values()))[0])
            drop_provider_in(session, dropped[0])
        return result

    monkeypatch.setattr(vcluster_plan, "place", place_then_drop)
    ops = VClusterOps(cloud.conf, cloud.database, submit=cloud.submit)
    servers = [{"name": f"s{i}", "type": "server",
                "spec": {"imageRef": "cirros", "flavorRef": "m1.small"}} for i in (1, 2)]
    vcluster, _ = ops.create(VClusterRequest(tenant_id="t1", user_id="u1", name="vc",
                                             instances=servers, groupings=[]))
    assert cloud.run(cloud.posted[-1]) == tf_states.SUCCESS
    view = ops.show(None, vcluster.id)
    assert view["status"] == states.ACTIVE
    assert dropped and all(m["host"] != dropped[0] for m in view["instances"])
    assert audit_kinds(cloud) == [("missing_provider", dropped[0])]


def _evacuate_live(cloud, **fields) -> dict:
    ops = EvacuationOps(cloud.conf, cloud.database, submit=cloud.submit,
                        compute=cloud.runtime.compute)
    view = ops.evacuate(EvacuationRequest(hosts=[SOURCE], mode=states.MODE_LIVE,
                                          on_error=states.ON_ERROR_PAUSE, **fields))
    assert cloud.run(cloud.posted[-1]) == tf_states.SUCCESS
    return ops.show(view["id"])


def test_an_evacuation_never_picks_a_host_without_provider(evac_cloud):
    uuid = boot(evac_cloud)
    ops = EvacuationOps(evac_cloud.conf, evac_cloud.database, submit=evac_cloud.submit,
                        compute=evac_cloud.runtime.compute)
    planned = ops.dry_run(EvacuationRequest(hosts=[SOURCE], mode=states.MODE_LIVE))
    gone = planned["instances"][0]["destination"]
    drop_provider(evac_cloud.database, gone)
    replanned = ops.dry_run(EvacuationRequest(hosts=[SOURCE], mode=states.MODE_LIVE))
    landed = replanned["instances"][0]["destination"]
    assert landed not in (gone, SOURCE)
    done = _evacuate_live(evac_cloud)
    assert done["status"] == states.DONE
    assert done["instances"][0]["destination"] == landed
    assert allocations(evac_cloud, uuid) == {stable_uuid(landed): {
        "VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}}
    assert audit_kinds(evac_cloud) == [("missing_provider", gone)]


def test_a_move_whose_destination_provider_vanished_goes_to_an_alternate(evac_cloud,
                                                                          monkeypatch):
    uuid = boot(evac_cloud)
    plan = move_plan.plan
    dropped = []

    def plan_then_drop(session, *args, **kwargs):
        result = plan(session, *args, **kwargs)
        if not dropped:
            # In the schedule's own transaction (SQLite has one writer at a time).
            dropped.append(result.candidates[uuid][0])
            drop_provider_in(session, dropped[0])
        return result

    monkeypatch.setattr(move_plan, "plan", plan_then_drop)
    done = _evacuate_live(evac_cloud)
    # on_error pause: never FAILED for a lost claim; an alternate takes the server.
    assert done["status"] == states.DONE
    move = done["instances"][0]
    assert move["status"] == states.DONE and move["destination"] != dropped[0]
    assert move["hosts_tried"] == [dropped[0], move["destination"]]
    assert allocations(evac_cloud, uuid) == {stable_uuid(move["destination"]): {
        "VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}}
    assert audit_kinds(evac_cloud) == [("missing_provider", dropped[0])]


def test_a_move_with_no_alternate_left_fails_alone_and_the_evacuation_pauses(evac_cloud,
                                                                             monkeypatch):
    uuid = boot(evac_cloud)
    target = "z1-r1-h02"
    plan = move_plan.plan
    dropped = []

    def plan_then_drop(session, *args, **kwargs):
        result = plan(session, *args, **kwargs)
        if not dropped:
            dropped.append(target)
            drop_provider_in(session, target)
        return result

    monkeypatch.setattr(move_plan, "plan", plan_then_drop)
    paused = _evacuate_live(evac_cloud, target_hosts=[target])
    # on_error pause: the one move FAILED, the evacuation PAUSED, never FAILED.
    assert dropped and paused["status"] == states.PAUSED
    move = paused["instances"][0]
    assert move["status"] == states.FAILED and move["fault"]["code"] == "NO_VALID_HOST"
    # Nothing of the lost claim is left: the server still holds its source.
    assert allocations(evac_cloud, uuid) == {stable_uuid(SOURCE): {
        "VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}}
