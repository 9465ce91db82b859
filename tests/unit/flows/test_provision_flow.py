"""The provision flow, whole, on TaskFlow's in-memory backend against real parts."""

import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.flows.provision.flow import provision_flow
from fleetflow.persistence import groups
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import GroupMember, Volume


def _instances(cloud, rid):
    with cloud.database.session() as s:
        return [(i.id, i.host, i.status, i.attempts, i.hosts_tried, i.fault)
                for i in rows.instances(s, rid)]


def _allocations(cloud, uuid):
    return cloud.runtime.placement.get_allocations(uuid).allocations


def _status(cloud, rid):
    with cloud.database.session() as s:
        r = rows.get(s, rid)
        return r.status, r.fault


def test_contract_every_requirement_is_provided_or_in_the_store(cloud):
    rid, job = cloud.reserve(2)
    flow = provision_flow(**job["kwargs"])
    provided = set(job["store"]) | {"fence"}
    names = [node.name for node, _ in flow.iter_nodes()]
    assert names[:3] == ["reservation-lifecycle", "schedule", "claim-primaries"]
    unordered = next(n for n, _ in flow.iter_nodes() if n.name == "instances")
    chain = next(iter(unordered))
    assert [a.name for a, _ in chain.iter_nodes()] == ["inst-0000-claim", "inst-0000-boot"]
    assert chain.retry.name == "inst-0000-retry"
    # Everything a task needs is in the store or provided by an earlier atom.
    provided |= {"placements", "primaries_claimed", "inst-0000.host", "inst-0001.host"}
    assert flow.requires <= provided | {"index"}


def test_reservation_goes_active_with_one_allocation_and_one_spawn_each(cloud):
    rid, job = cloud.reserve(4)
    assert cloud.run(job) == tf_states.SUCCESS
    assert _status(cloud, rid) == (states.ACTIVE, None)
    instances = _instances(cloud, rid)
    assert {i[2] for i in instances} == {states.ACTIVE}
    for uuid, host, *_ in instances:
        assert list(_allocations(cloud, uuid).values()) == [
            {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}]
        assert cloud.driver.spawn_count(uuid) == 1
        assert cloud.runtime.compute.get_instance(host, uuid)["state"] == states.ACTIVE


def test_boot_failure_reschedules_onto_an_alternate(cloud):
    healthy = "z1-r1-h03"
    # Load the healthy host a little so spreading prefers the two broken ones.
    cloud.runtime.placement.claim("00000000-0000-0000-0000-00000000beef",
                                  {_provider(healthy): {"VCPU": 1}}, "other", "other")
    for host in ("z1-r1-h01", "z1-r1-h02"):
        cloud.driver.set_faults(host, fail_next=5)
    rid, job = cloud.reserve(1, capabilities={"gpu": "true"})
    assert cloud.run(job) == tf_states.SUCCESS
    (uuid, host, status, attempts, tried, fault), = _instances(cloud, rid)
    assert (status, host, fault) == (states.ACTIVE, healthy, None)
    assert tried[0] != healthy and tried[-1] == healthy and attempts == len(tried) >= 2
    # The failed attempts left nothing behind: no guest, no allocation there.
    for broken in tried[:-1]:
        assert cloud.runtime.compute.get_instance(broken, uuid) is None
    assert list(_allocations(cloud, uuid)) == [_provider(healthy)]
    assert cloud.driver.spawn_count(uuid) == 1


def _provider(host):
    from fleetflow.persistence.fleet import stable_uuid

    return stable_uuid(host)


def test_all_or_nothing_reverts_everything(cloud):
    rid, job = cloud.reserve(3, capabilities={"gpu": "true"})
    for host in ("z1-r1-h01", "z1-r1-h02", "z1-r1-h03"):
        cloud.driver.set_faults(host, fail_next=100)
    assert cloud.run(job) == tf_states.REVERTED
    status, fault = _status(cloud, rid)
    assert status == states.REVERTED and fault is not None
    for uuid, *_ in _instances(cloud, rid):
        assert _allocations(cloud, uuid) == {}
        for h in ("z1-r1-h01", "z1-r1-h02", "z1-r1-h03"):
            assert cloud.runtime.compute.get_instance(h, uuid) is None
    used = cloud.runtime.placement.usages_by_provider()
    assert all(amount == 0 for usage in used.values() for amount in usage.values())
    with cloud.database.session() as s:
        assert {i.status for i in rows.instances(s, rid)} == {states.REVERTED}


def test_best_effort_keeps_what_booted(cloud):
    # 3 gpu hosts x 2 "half" instances each = 6 fit; one host fails every build.
    cloud.driver.set_faults("z1-r1-h01", fail_next=100)
    rid, job = cloud.reserve(6, flavor="m1.half", capabilities={"gpu": "true"},
                             min_count=2, policy=states.BEST_EFFORT)
    assert cloud.run(job) == tf_states.SUCCESS
    status, _ = _status(cloud, rid)
    assert status == states.PARTIAL
    instances = _instances(cloud, rid)
    active = [i for i in instances if i[2] == states.ACTIVE]
    failed = [i for i in instances if i[2] == states.ERROR]
    assert len(active) == 4 and len(failed) == 2
    for uuid, host, _state, _attempts, tried, fault in failed:
        assert fault is not None
        assert _allocations(cloud, uuid) == {}
        # On no host now; the broken host it was built on is among its tries.
        assert host is None and "z1-r1-h01" in tried
    assert all(host != "z1-r1-h01" for _uuid, host, *_ in active)
    summary = _status(cloud, rid)[1]
    assert summary["message"].startswith("2 of 6 instances did not become ACTIVE: 2 ")


def test_group_membership_follows_the_instances(cloud):
    with cloud.database.session() as s:
        gid = groups.create(s, "t1", "spread", ["anti-affinity"]).id
    rid, job = cloud.reserve(6, group_id=gid)
    assert cloud.run(job) == tf_states.SUCCESS
    with cloud.database.session() as s:
        hosts = list(s.scalars(sa.select(GroupMember.host).where(GroupMember.group_id == gid)))
    assert len(hosts) == 6 and len(set(hosts)) == 6
    rid2, job2 = cloud.reserve(1, group_id=gid)
    assert cloud.run(job2) == tf_states.REVERTED
    with cloud.database.session() as s:
        assert groups.member_count(s, gid) == 6
        assert "NO_VALID_HOST" in rows.get(s, rid2).fault["code"]


def test_data_volumes_are_created_near_the_host_and_attached(cloud):
    rid, job = cloud.reserve(2, volume_gb=10)
    assert job["kwargs"]["with_volumes"] is True
    assert cloud.run(job) == tf_states.SUCCESS
    with cloud.database.session() as s:
        volumes = list(s.scalars(sa.select(Volume)))
        assert len(volumes) == 2
        assert {v.status for v in volumes} == {states.VOLUME_IN_USE}
    for v in volumes:
        assert list(_allocations(cloud, v.id).values()) == [{"DISK_GB": 10}]


def _dry_run(cloud, count, **fields):
    from fleetflow.services.reservations import ReservationOps, ReservationRequest

    ops = ReservationOps(cloud.conf, cloud.database, submit=lambda *a, **k: None)
    return ops.dry_run(ReservationRequest(tenant_id="t1", user_id="u1", flavor_ref="m1.small",
                                          image_ref="cirros", min_count=count,
                                          max_count=count, **fields))


def test_a_volume_no_backend_holds_fails_at_schedule_as_the_dry_run_says(cloud):
    # Each rack's shared backend holds 1,000 GB; nothing bigger can be attached.
    verdict = _dry_run(cloud, 1, volume_gb=5000)
    assert verdict["fits"] is False
    assert "storage: 6 -> 0 (5000 GB volumes: at most 1000 GB free" in verdict["explanation"]
    rid, job = cloud.reserve(1, volume_gb=5000)
    assert cloud.run(job) == tf_states.REVERTED
    status, fault = _status(cloud, rid)
    assert fault["code"] == "NO_VALID_HOST" and fault["step"] == "schedule"
    assert "storage: 6 -> 0" in fault["message"]
    for uuid, *_ in _instances(cloud, rid):
        assert cloud.driver.spawn_count(uuid) == 0  # no host was ever tried


def test_volumes_sharing_a_rack_backend_are_counted_in_the_pass(cloud):
    # 600 GB each: one per rack's 1,000 GB backend, so two fit and a third does not,
    # though the hosts have CPU and memory for all three.
    assert _dry_run(cloud, 2, volume_gb=600)["fits"] is True
    verdict = _dry_run(cloud, 3, volume_gb=600)
    assert verdict["fits"] is False and verdict["placed"] == 2
    assert "storage: 6 -> 0 (600 GB volumes: at most 400 GB free" in verdict["explanation"]
    rid, job = cloud.reserve(3, volume_gb=600)
    assert cloud.run(job) == tf_states.REVERTED
    assert _status(cloud, rid)[1]["code"] == "NO_VALID_HOST"
    rid, job = cloud.reserve(2, volume_gb=600)
    assert cloud.run(job) == tf_states.SUCCESS
    with cloud.database.session() as s:
        backends = {v.backend for v in s.scalars(sa.select(Volume).where(
            Volume.reservation_id == rid))}
    assert len(backends) == 2


def test_best_effort_partial_shows_where_instances_really_went(cloud, monkeypatch):
    from fleetflow.persistence.placement.errors import PlacementConflict

    rid, job = cloud.reserve(3, min_count=2, policy=states.BEST_EFFORT)
    with cloud.database.session() as s:
        never_placed = rows.instance_ids(s, rid)[2]
    claim = cloud.runtime.placement.claim

    def claim_but_one(consumer, *args, **kwargs):
        # Every host fills up under this instance before it can claim.
        if consumer == never_placed:
            raise PlacementConflict("the host filled up meanwhile")
        return claim(consumer, *args, **kwargs)

    monkeypatch.setattr(cloud.runtime.placement, "claim", claim_but_one)
    assert cloud.run(job) == tf_states.SUCCESS
    status, fault = _status(cloud, rid)
    assert status == states.PARTIAL
    by_id = {i[0]: i for i in _instances(cloud, rid)}
    _uuid, host, state, attempts, tried, instance_fault = by_id.pop(never_placed)
    assert (host, state, attempts, tried) == (None, states.ERROR, 0, [])
    assert instance_fault["code"] == "NO_VALID_HOST"
    for _uuid, host, state, attempts, tried, _fault in by_id.values():
        assert state == states.ACTIVE and tried == [host] and attempts == 1
    assert fault["code"] == "NO_VALID_HOST"
    assert fault["message"].startswith("1 of 3 instances did not become ACTIVE")
