"""The queue's admission pass on the flow-test cloud: gang admission, backfill and its
bound, priorities, fair share, quotas at admission, timeouts, cancelling.

The fleet (fleetflow.testing.SMALL_FLEET): rack r1 of three GPU hosts and rack r2 of
three blue-sticker hosts, 4 VCPUs each; ``m1.small`` takes one. Each test fills it,
queues requests, frees capacity by deleting servers through their real teardown
flow, and runs a pass as a conductor's admitter would.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import queue as queue_rows
from fleetflow.persistence.models import Instance, Reservation, utcnow
from fleetflow.services.queue import admission, views
from fleetflow.services.reservations import ReservationOps, ReservationRequest

GPU = {"gpu": "true"}
BLUE = {"sticker": "blue"}


@pytest.fixture
def cloud(fleetflow_cloud):
    return fleetflow_cloud


@pytest.fixture
def ops(cloud):
    return ReservationOps(cloud.conf, cloud.database, submit=cloud.submit)


def _fill(cloud, tenant="filler", count=24):
    rid, job = cloud.reserve(count, tenant_id=tenant)
    assert cloud.run(job).state == "SUCCESS"
    return rid


def _queue(ops, count, tenant="t1", **fields):
    req = ReservationRequest(tenant_id=tenant, user_id="u1", flavor_ref="m1.small",
                             image_ref="cirros", min_count=fields.pop("min_count", count),
                             max_count=count, when_full=states.WHEN_FULL_QUEUE, **fields)
    reservation, _ = ops.reserve(req)
    assert reservation.status == states.QUEUED
    return reservation.id


def _free(cloud, ops, rack: str, n: int, tenant="filler"):
    """Delete ``n`` of ``tenant``'s servers on ``rack`` through their teardown flow."""
    with cloud.database.session() as session:
        victims = list(session.scalars(sa.select(Instance.id).where(
            Instance.tenant_id == tenant, Instance.status == states.ACTIVE,
            Instance.host.like(f"%-{rack}-%")).order_by(Instance.host, Instance.id).limit(n)))
    assert len(victims) == n
    for instance_id in victims:
        ops.delete_server(tenant, instance_id)
        assert cloud.run(cloud.posted[-1]).state == "SUCCESS"


def _status(cloud, rid):
    with cloud.database.session() as session:
        return session.get(Reservation, rid).status


def _run_admitted(cloud, result):
    by_reservation = {job["kwargs"].get("reservation_id"): job for job in cloud.posted}
    for rid in result.admitted:
        assert cloud.run(by_reservation[rid]).state == "SUCCESS"


def _entry(cloud, rid):
    with cloud.database.session() as session:
        entry = queue_rows.find(session, queue_rows.KIND_RESERVATION, rid)
        session.expunge_all()
        return entry


def test_backfill_then_gang_admission_when_enough_is_freed(cloud, ops):
    _fill(cloud)
    big = _queue(ops, 6, capabilities=GPU)
    small = _queue(ops, 2, capabilities=BLUE)
    result = admission.run_pass(cloud.conf, cloud.database, ops)
    assert result.admitted == [] and result.head == big
    with cloud.database.session() as session:
        view = views.entry_view(session, queue_rows.KIND_RESERVATION, big)
        assert view["position"] == 1 and view["ahead"] == 0
        assert view["why"].startswith("No valid host for instance 1")
        assert views.entry_view(session, queue_rows.KIND_RESERVATION, small)["ahead"] == 1
        # Nothing is held while waiting: no instance rows, so no allocation either.
        assert session.scalar(sa.select(sa.func.count()).select_from(Instance).where(
            Instance.reservation_id.in_([big, small]))) == 0

    _free(cloud, ops, "r2", 2)
    result = admission.run_pass(cloud.conf, cloud.database, ops)
    assert result.admitted == [small]  # backfilled: the big one does not fit yet
    _run_admitted(cloud, result)
    assert _status(cloud, small) == states.ACTIVE
    assert _entry(cloud, big).bypassed == 1

    _free(cloud, ops, "r1", 3)  # half of what the big one needs: it takes nothing
    assert admission.run_pass(cloud.conf, cloud.database, ops).admitted == []
    assert _status(cloud, big) == states.QUEUED
    assert "placed 3" in _entry(cloud, big).why

    _free(cloud, ops, "r1", 3)
    result = admission.run_pass(cloud.conf, cloud.database, ops)
    assert result.admitted == [big]
    _run_admitted(cloud, result)
    with cloud.database.session() as session:
        assert session.get(Reservation, big).status == states.ACTIVE
        assert session.scalar(sa.select(sa.func.count()).select_from(Instance).where(
            Instance.reservation_id == big, Instance.status == states.ACTIVE)) == 6
    # Its flow claimed everything: the next pass forgets it.
    admission.run_pass(cloud.conf, cloud.database, ops)
    assert _entry(cloud, big) is None
    cloud.assert_audit_clean()


def test_priority_goes_first_and_equal_ones_keep_their_order(cloud, ops):
    _fill(cloud)
    first = _queue(ops, 2)
    second = _queue(ops, 2)
    urgent = _queue(ops, 2, priority=5)
    _free(cloud, ops, "r2", 2)
    assert admission.run_pass(cloud.conf, cloud.database, ops).admitted == [urgent]
    _free(cloud, ops, "r2", 2)
    assert admission.run_pass(cloud.conf, cloud.database, ops).admitted == [first]
    assert _status(cloud, second) == states.QUEUED


def test_starvation_bound_holds_the_heads_hosts_back(cloud, ops):
    cloud.conf.set_override("max_bypass", 1, group="queue")
    _fill(cloud)
    head = _queue(ops, 6, capabilities=GPU)
    anywhere = [_queue(ops, 1) for _ in range(2)]
    _free(cloud, ops, "r1", 1)
    # Not held yet: the first small one takes the GPU host's freed slot.
    assert admission.run_pass(cloud.conf, cloud.database, ops).admitted == [anywhere[0]]
    assert _entry(cloud, head).bypassed == 1
    _free(cloud, ops, "r1", 1)
    result = admission.run_pass(cloud.conf, cloud.database, ops)
    # Bound reached: the GPU hosts (all the head could use) are held back.
    assert result.admitted == [] and result.held == 3
    assert _status(cloud, anywhere[1]) == states.QUEUED
    _free(cloud, ops, "r2", 1)  # a host the head can never use: backfill goes on
    assert admission.run_pass(cloud.conf, cloud.database, ops).admitted == [anywhere[1]]


def test_fair_share_puts_the_project_below_its_share_first(cloud, ops):
    _fill(cloud, tenant="heavy", count=20)
    _fill(cloud, tenant="light", count=4)
    heavy = _queue(ops, 2, tenant="heavy")
    light = _queue(ops, 2, tenant="light")
    _free(cloud, ops, "r2", 2, tenant="heavy")
    assert admission.run_pass(cloud.conf, cloud.database, ops).admitted == [light]
    cloud.conf.set_override("fair_share", False, group="queue")
    _free(cloud, ops, "r2", 2, tenant="heavy")
    assert admission.run_pass(cloud.conf, cloud.database, ops).admitted == [heavy]


def test_quota_counts_at_admission_not_while_queued(cloud, ops):
    from fleetflow.persistence import reservations as rows

    _fill(cloud)
    with cloud.database.session() as session:
        rows.set_quota(session, "t1", {"instances": 3, "vcpus": 100, "ram_mb": 10**7})
    first = _queue(ops, 2)
    second = _queue(ops, 2)  # the first, waiting, does not count against it
    with pytest.raises(rows.QuotaExceeded):
        _queue(ops, 4)  # more than the limit alone: refused at once
    _free(cloud, ops, "r2", 4)
    result = admission.run_pass(cloud.conf, cloud.database, ops)
    assert result.admitted == [first]
    assert "quota exceeded for instances" in _entry(cloud, second).why


def test_queue_timeout_ends_expired_with_the_explanation(cloud, ops):
    _fill(cloud)
    rid = _queue(ops, 2, capabilities=GPU, queue_timeout=60)
    admission.run_pass(cloud.conf, cloud.database, ops)
    later = utcnow() + dt.timedelta(seconds=61)
    assert admission.run_pass(cloud.conf, cloud.database, ops, now=later).expired == [rid]
    with cloud.database.session() as session:
        reservation = session.get(Reservation, rid)
        assert reservation.status == states.EXPIRED
        assert reservation.fault["code"] == admission.QUEUE_TIMEOUT
        assert "capabilities" in reservation.fault["message"]
    assert _entry(cloud, rid) is None
    assert ops.delete_reservation("t1", rid).status == states.DELETED


def test_delete_cancels_a_queued_reservation(cloud, ops):
    _fill(cloud)
    rid = _queue(ops, 2)
    assert ops.delete_reservation("t1", rid).status == states.DELETED
    _free(cloud, ops, "r2", 2)
    assert admission.run_pass(cloud.conf, cloud.database, ops).admitted == []
    assert _status(cloud, rid) == states.DELETED and _entry(cloud, rid) is None


def test_two_concurrent_passes_never_admit_one_request_twice(cloud, ops):
    _fill(cloud)
    queued = [_queue(ops, 1) for _ in range(4)]
    _free(cloud, ops, "r2", 4)
    posted_before = len(cloud.posted)
    results, start = [], threading.Barrier(2)

    def one_pass():
        start.wait()
        results.append(admission.run_pass(cloud.conf, cloud.database, ops))

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = [rid for r in results for rid in r.admitted]
    assert sorted(admitted) == sorted(queued)  # each once, across both passes
    provision = [j for j in cloud.posted[posted_before:] if j["flow"] == "provision"]
    assert sorted(j["kwargs"]["reservation_id"] for j in provision) == sorted(queued)
    assert ops.admit is not None and not _admit_again(cloud, ops, queued[0])


def _admit_again(cloud, ops, rid) -> bool:
    with cloud.database.session() as session:
        return ops.admit(session, rid)


def test_an_idle_admitter_reads_only_the_waiting_count(cloud, ops, monkeypatch):
    from fleetflow.persistence import queue as queue_rows
    from fleetflow.services.queue.admitter import IDLE_POLL, Admitter

    stamps = []
    real_stamp = queue_rows.stamp
    monkeypatch.setattr(queue_rows, "stamp", lambda session: stamps.append(1) or real_stamp(
        session))
    admitter = Admitter(cloud.conf, cloud.database, ops, "test")
    assert not admitter.due() and len(stamps) == 1  # the first look reads the stamp
    _fill(cloud, count=5)
    for _ in range(3):
        assert not admitter.due()
    assert len(stamps) == 1 and admitter.wait_seconds() >= IDLE_POLL
    _queue(ops, 2)
    assert admitter.due() and len(stamps) == 2  # a request queued: due at once
    assert admitter.wait_seconds() == admitter.interval


def test_the_admitter_runs_a_pass_when_capacity_is_freed_not_when_claimed(cloud, ops):
    from fleetflow.services.queue.admitter import Admitter

    cloud.conf.set_override("interval", 3600.0, group="queue")  # no safety-net pass here
    admitter = Admitter(cloud.conf, cloud.database, ops, "test")
    _fill(cloud, count=20)
    assert not admitter.due()  # nothing queued: no pass, whatever changed
    rid = _queue(ops, 6)
    assert admitter.due()  # a request queued
    assert admitter.run_once().admitted == []  # 4 free, 6 wanted
    admitter._last_pass = time.monotonic()
    assert not admitter.due()
    _fill(cloud, tenant="other", count=1)  # a claim: nothing freed
    assert not admitter.due()
    _free(cloud, ops, "r2", 3)
    assert admitter.due()
    assert admitter.run_once().admitted == [rid]
    # Another process's admitter waits for the lease while this one holds it.
    _queue(ops, 1)
    assert Admitter(cloud.conf, cloud.database, ops, "other").run_once() is None
    assert admitter.run_once() is not None
