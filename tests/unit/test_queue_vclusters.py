"""Virtual clusters in the queue: gang admission of every member, backfill with
reservations, the starvation bound, timeouts, quotas at admission, cancelling.

The fleet (fleetflow.testing.SMALL_FLEET): rack r1 of three GPU hosts and rack r2 of
three blue-sticker hosts, 4 VCPUs each; ``m1.small`` takes one. Each test fills it,
queues clusters (and reservations), frees capacity through real teardown flows and
runs a pass as a conductor's admitter would; admitted builds run their real flow.
"""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import queue as queue_rows
from fleetflow.persistence import reservations as res_rows
from fleetflow.persistence.models import Instance, VCluster, VClusterMember, utcnow
from fleetflow.services.queue import admission
from fleetflow.services.reservations import ReservationOps, ReservationRequest
from fleetflow.services.vclusters import VClusterOps, VClusterRequest

GPU = {"gpu": "true"}


@pytest.fixture
def cloud(fleetflow_cloud):
    return fleetflow_cloud


@pytest.fixture
def rops(cloud):
    return ReservationOps(cloud.conf, cloud.database, submit=cloud.submit)


@pytest.fixture
def ops(cloud, rops):
    return {queue_rows.KIND_RESERVATION: rops,
            queue_rows.KIND_VCLUSTER: VClusterOps(cloud.conf, cloud.database,
                                                  submit=cloud.submit)}


def _server(name: str, **capabilities) -> dict:
    spec = {"imageRef": "cirros", "flavorRef": "m1.small"}
    if capabilities:
        spec["capabilities"] = capabilities
    return {"name": name, "type": "server", "spec": spec}


def _cluster(ops, n: int, tenant="t1", apart=False, capabilities=None, **fields) -> str:
    names = [f"node-{i}" for i in range(n)]
    groupings = ([{"name": "apart", "membersRef": names, "spec": {"rule": "anti-affinity"}}]
                 if apart else [])
    req = VClusterRequest(tenant_id=tenant, user_id="u1", name="job",
                          instances=[_server(x, **(capabilities or {})) for x in names],
                          groupings=groupings, when_full=states.WHEN_FULL_QUEUE, **fields)
    vcluster, created = ops[queue_rows.KIND_VCLUSTER].create(req)
    assert created and vcluster.status == states.QUEUED
    return vcluster.id


def _reservation(rops, count: int, tenant="t1") -> str:
    req = ReservationRequest(tenant_id=tenant, user_id="u1", flavor_ref="m1.small",
                             image_ref="cirros", min_count=count, max_count=count,
                             when_full=states.WHEN_FULL_QUEUE)
    return rops.reserve(req)[0].id


def _fill(cloud, count=24):
    _, job = cloud.reserve(count, tenant_id="filler")
    assert cloud.run(job).state == "SUCCESS"


def _free(cloud, rops, n: int, rack: str | None = None, spread=False):
    """Delete ``n`` filler servers (on ``rack``; ``spread``: on ``n`` different hosts)."""
    with cloud.database.session() as session:
        query = sa.select(Instance.id, Instance.host).where(
            Instance.tenant_id == "filler", Instance.status == states.ACTIVE)
        if rack:
            query = query.where(Instance.host.like(f"%-{rack}-%"))
        found = session.execute(query.order_by(Instance.host, Instance.id)).all()
    if spread:
        by_host = {}
        for instance_id, host in found:
            by_host.setdefault(host, instance_id)
        found = [(i, h) for h, i in by_host.items()]
    victims = [instance_id for instance_id, _ in found[:n]]
    assert len(victims) == n
    for instance_id in victims:
        rops.delete_server("filler", instance_id)
        assert cloud.run(cloud.posted[-1]).state == "SUCCESS"


def _pass(cloud, ops, now=None):
    return admission.run_pass(cloud.conf, cloud.database, ops, now=now)


def _run_builds(cloud, result):
    by_ref = {job["kwargs"].get("vcluster_id") or job["kwargs"].get("reservation_id"): job
              for job in cloud.posted}
    for ref in result.admitted:
        assert cloud.run(by_ref[ref]).state == "SUCCESS"


def _vcluster(cloud, vid) -> VCluster:
    with cloud.database.session() as session:
        vcluster = session.get(VCluster, vid)
        session.expunge(vcluster)
        return vcluster


def _members(cloud, vid) -> int:
    with cloud.database.session() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(VClusterMember)
                              .where(VClusterMember.vcluster_id == vid))


def test_a_cluster_is_admitted_only_when_all_its_members_fit_apart(cloud, ops, rops):
    _fill(cloud)
    vid = _cluster(ops, 3, apart=True)
    assert _pass(cloud, ops).admitted == [] and _members(cloud, vid) == 0  # holds nothing
    view = ops[queue_rows.KIND_VCLUSTER].show("t1", vid)
    assert view["status"] == states.QUEUED and view["instances"] == []
    assert view["queue"]["position"] == 1 and view["queue"]["why"]

    _free(cloud, rops, 3, rack="r2")  # three slots, one host: anti-affinity cannot hold
    assert _pass(cloud, ops).admitted == []
    assert _vcluster(cloud, vid).status == states.QUEUED

    _free(cloud, rops, 2, rack="r1", spread=True)  # now three hosts have room
    result = _pass(cloud, ops)
    assert result.admitted == [vid]
    _run_builds(cloud, result)
    view = ops[queue_rows.KIND_VCLUSTER].show("t1", vid)
    assert view["status"] == states.ACTIVE and view["queue"] is None
    hosts = {m["host"] for m in view["instances"]}
    assert len(view["instances"]) == 3 and len(hosts) == 3
    _pass(cloud, ops)  # its build claimed: the entry goes
    with cloud.database.session() as session:
        assert queue_rows.find(session, queue_rows.KIND_VCLUSTER, vid) is None
    cloud.assert_audit_clean()


def test_a_reservation_backfills_behind_a_waiting_cluster_until_the_bound(cloud, ops, rops):
    cloud.conf.set_override("max_bypass", 1, group="queue")
    _fill(cloud)
    big = _cluster(ops, 4, capabilities=GPU)
    small = [_reservation(rops, 1) for _ in range(2)]
    _free(cloud, rops, 1, rack="r1")
    result = _pass(cloud, ops)
    assert result.admitted == [small[0]] and result.head == big
    _run_builds(cloud, result)
    _free(cloud, rops, 1, rack="r1")
    result = _pass(cloud, ops)  # bypassed once: the GPU hosts are the cluster's now
    assert result.admitted == [] and result.held == 3
    _free(cloud, rops, 3, rack="r1")
    result = _pass(cloud, ops)
    assert result.admitted == [big]
    _run_builds(cloud, result)
    assert _vcluster(cloud, big).status == states.ACTIVE
    assert _members(cloud, big) == 4
    cloud.assert_audit_clean()


def test_an_admitted_cluster_not_built_yet_keeps_its_capacity(cloud, ops, rops):
    _fill(cloud)
    vid = _cluster(ops, 2)
    _free(cloud, rops, 2, rack="r2")
    assert _pass(cloud, ops).admitted == [vid]
    late = _reservation(rops, 1)
    # The build has not claimed: the next pass counts its two servers as taken.
    assert _pass(cloud, ops).admitted == []
    with cloud.database.session() as session:
        assert "No valid host" in queue_rows.find(session, queue_rows.KIND_RESERVATION,
                                                  late).why


def test_timeout_quota_and_cancel(cloud, ops, rops):
    _fill(cloud)
    with cloud.database.session() as session:
        res_rows.set_quota(session, "t1", {"instances": 3, "vcpus": 100, "ram_mb": 10**7})
    with pytest.raises(res_rows.QuotaExceeded):
        _cluster(ops, 4)  # more than the limit alone: refused at once, nothing written
    expiring = _cluster(ops, 2, capabilities=GPU, queue_timeout=60)
    over = _cluster(ops, 2)  # the waiting one does not count against the quota
    _free(cloud, rops, 4, rack="r2")
    vcluster_ops = ops[queue_rows.KIND_VCLUSTER]
    result = _pass(cloud, ops, now=utcnow() + dt.timedelta(seconds=61))
    assert result.expired == [expiring] and result.admitted == [over]
    expired = _vcluster(cloud, expiring)
    assert expired.status == states.EXPIRED
    assert expired.fault["code"] == admission.QUEUE_TIMEOUT
    assert "capabilities" in expired.fault["message"]
    assert vcluster_ops.delete("t1", expiring).status == states.DELETED
    third = _cluster(ops, 2)  # 2 used + 2 asked > 3: stays queued with the quota's why
    assert _pass(cloud, ops).admitted == []
    with cloud.database.session() as session:
        assert "quota exceeded" in queue_rows.find(session, queue_rows.KIND_VCLUSTER,
                                                   third).why
    assert vcluster_ops.delete("t1", third).status == states.DELETED
    assert _members(cloud, third) == 0
    with cloud.database.session() as session:
        assert queue_rows.find(session, queue_rows.KIND_VCLUSTER, third) is None
