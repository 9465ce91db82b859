"""The audit sees stuck work: stranded flows and statuses that disagree with their members.

Embedded mode: the SQL jobboard and fleetflow's logbook backend on one SQLite
database, domain rows written directly. Flows are the toy flows of
conftest.py, saved (never run) with the store an operation gives them; what
the tests change is what a crash or a lost board leaves: the flow detail's
state and last write, the job, the claim.
"""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.common import ids, states
from fleetflow.engine import submit as submit_mod
from fleetflow.persistence import intents
from fleetflow.persistence.jobs import Job as JobRow
from fleetflow.persistence.logbook.backend import LogbookBackend
from fleetflow.persistence.logbook.models import FLOWDETAILS
from fleetflow.persistence.models import (
    Evacuation,
    Instance,
    Reservation,
    VCluster,
    VClusterMember,
    Volume,
)
from fleetflow.plugin.flow_meta import META_KEY
from fleetflow.services.audit import flows as audit_flows
from fleetflow.services.audit.report import KINDS, audit

LONG_AGO = dt.timedelta(minutes=10)


@pytest.fixture
def sql_backend(database):
    return LogbookBackend({"connection": database.url}, engine=database.engine)


@pytest.fixture
def sql_board(engine_conf, database, sql_backend):
    from fleetflow.engine.jobboard.boards import make_jobboard

    board = make_jobboard(engine_conf, sql_backend)
    yield board
    board.close()


def _now():
    return audit_flows.utcnow()


def _run(database, board=None, **kwargs):
    """The whole audit without placement or hosts: what is left is the flows' part."""
    return audit(database, None, None, board=board, **kwargs)


def _only(report, kind, subject):
    assert [(m.kind, m.subject) for m in report.mismatches] == [(kind, subject)], \
        report.summary()
    return report.mismatches[0]


def _flow(board, backend, **store):
    """A saved flow with its job posted, as an operation's submission leaves it."""
    return submit_mod.submit(board, backend, "toy-linear", {"count": 1}, store=store)


def _set_flow(database, flow_id, state, age=LONG_AGO, paused=False):
    """The flow detail says ``state``, last written ``age`` ago (and paused, if so)."""
    from oslo_serialization import jsonutils

    with database.transaction() as conn:
        meta = jsonutils.loads(conn.scalar(sa.select(FLOWDETAILS.c.meta)
                                           .where(FLOWDETAILS.c.uuid == flow_id)))
        if paused:
            meta[META_KEY].update(paused=True, paused_at="step-0000")
        conn.execute(FLOWDETAILS.update().where(FLOWDETAILS.c.uuid == flow_id).values(
            state=state, meta=jsonutils.dumps(meta), updated_at=_now() - age))


def _lose_jobs(database, flow_id):
    """The board lost the flow's job (a Redis restarted empty, a crash before the post)."""
    with database.session() as session:
        session.execute(sa.update(JobRow).where(JobRow.name == flow_id)
                        .values(state="COMPLETE"))


def _reservation(database, status, instance_statuses, flow_id=None, age=LONG_AGO):
    """A reservation and its instances, last changed ``age`` ago."""
    reservation_id = ids.new_uuid()
    when = _now() - age
    with database.session() as session:
        session.add(Reservation(id=reservation_id, tenant_id="t1", status=status,
                                flow_id=flow_id, request={}, created_at=when,
                                updated_at=when))
        session.flush()
        for index, status_ in enumerate(instance_statuses):
            session.add(Instance(id=ids.new_uuid(), reservation_id=reservation_id,
                                 tenant_id="t1", name=f"vm-{index}", index=index,
                                 status=status_, flavor_id="1", image_id="i",
                                 created_at=when, updated_at=when))
    return reservation_id


def _provisioned(database, board, backend, status, instance_statuses, flow_state):
    """A reservation whose provision flow ended (or stopped) in ``flow_state``."""
    reservation_id = ids.new_uuid()
    flow_id = _flow(board, backend, reservation_id=reservation_id)
    _set_flow(database, flow_id, flow_state)
    if flow_state in (tf_states.SUCCESS, tf_states.REVERTED, tf_states.FAILURE):
        _lose_jobs(database, flow_id)  # its conductor consumed it
    with database.session() as session:
        session.add(Reservation(id=reservation_id, tenant_id="t1", status=status,
                                flow_id=flow_id, request={}))
        session.flush()
        for index, status_ in enumerate(instance_statuses):
            session.add(Instance(id=ids.new_uuid(), reservation_id=reservation_id,
                                 tenant_id="t1", name=f"vm-{index}", index=index,
                                 status=status_, flavor_id="1", image_id="i"))
    return reservation_id, flow_id


# -- stranded flows ----------------------------------------------------------------------

def test_the_redis_restart_story_is_reported_twice(database, sql_board, sql_backend):
    """BUILDING with every instance ACTIVE, its flow SUSPENDED and no job: both halves."""
    reservation_id, flow_id = _provisioned(database, sql_board, sql_backend,
                                           states.BUILDING, [states.ACTIVE] * 300,
                                           tf_states.SUSPENDED)
    _lose_jobs(database, flow_id)
    report = _run(database, sql_board)
    assert sorted((m.kind, m.subject) for m in report.mismatches) == [
        ("status_mismatch", reservation_id), ("stranded_flow", flow_id)], report.summary()
    stranded = report.of_kind("stranded_flow")[0]
    assert f"toy-linear flow SUSPENDED on reservation {reservation_id}" in stranded.detail
    assert stranded.detail.endswith("no job on the board")
    status = report.of_kind("status_mismatch")[0].detail
    assert "reservation BUILDING but every instance has settled (300 ACTIVE)" in status
    assert f"its flow {flow_id} is SUSPENDED" in status
    assert (report.counts["jobboard"], report.counts["jobs"],
            report.counts["unfinished_flows"]) == (1, 0, 1)
    # Strict (every flow expected to have settled) says the same, the grace aside.
    assert len(_run(database, sql_board, strict=True).mismatches) == 2
    assert {"stranded_flow", "status_mismatch"} <= set(KINDS)


def test_a_suspended_flow_without_a_job_is_stranded(database, sql_board, sql_backend):
    reservation_id = ids.new_uuid()
    flow_id = _flow(sql_board, sql_backend, reservation_id=reservation_id)
    _set_flow(database, flow_id, tf_states.SUSPENDED)
    _lose_jobs(database, flow_id)
    found = _only(_run(database, sql_board), "stranded_flow", flow_id)
    assert "no progress since" in found.detail and "(600 s ago)" in found.detail


def test_a_flow_whose_job_a_live_owner_holds_is_clean(database, sql_board, sql_backend):
    flow_id = _flow(sql_board, sql_backend, vcluster_id="vc-1")
    _set_flow(database, flow_id, tf_states.RUNNING)  # a long boot: no checkpoint for minutes
    [job] = list(sql_board.iterjobs())
    sql_board.claim(job, "conductor-1", expiry=600)
    report = _run(database, sql_board, strict=True)
    assert report.clean, report.summary()
    assert report.counts["jobs"] == 1


def test_a_paused_flow_is_an_operators_not_stranded(database, sql_board, sql_backend):
    flow_id = _flow(sql_board, sql_backend, evacuation_id="e-1")
    _set_flow(database, flow_id, tf_states.SUSPENDED, paused=True)
    _lose_jobs(database, flow_id)  # a conductor consumes a paused flow's job
    report = _run(database, sql_board, strict=True)
    assert report.clean, report.summary()


def test_a_running_flow_whose_claim_expired_is_stranded(database, sql_board, sql_backend):
    flow_id = _flow(sql_board, sql_backend, reservation_id="r-1")
    _set_flow(database, flow_id, tf_states.RUNNING)
    [job] = list(sql_board.iterjobs())
    sql_board.claim(job, "conductor-dead", expiry=600)
    with database.session() as session:  # its conductor died five minutes ago
        session.execute(sa.update(JobRow).where(JobRow.uuid == job.uuid).values(
            claim_expires_at=_now() - dt.timedelta(minutes=5)))
    found = _only(_run(database, sql_board), "stranded_flow", flow_id)
    assert "toy-linear flow RUNNING on reservation r-1" in found.detail
    assert "its job's claim by conductor-dead expired at" in found.detail
    # Expired just now: a conductor is about to take it over.
    with database.session() as session:
        session.execute(sa.update(JobRow).where(JobRow.uuid == job.uuid).values(
            claim_expires_at=_now() - dt.timedelta(seconds=5)))
    assert _run(database, sql_board).clean


def test_a_job_nobody_claims_strands_its_flow_after_the_grace(database, sql_board,
                                                              sql_backend):
    flow_id = _flow(sql_board, sql_backend, reservation_id="r-2")
    _set_flow(database, flow_id, tf_states.PENDING)
    assert _run(database, sql_board).clean  # posted a moment ago: no conductor yet
    with database.session() as session:
        session.execute(sa.update(JobRow).where(JobRow.name == flow_id)
                        .values(updated_at=_now() - LONG_AGO))
    found = _only(_run(database, sql_board), "stranded_flow", flow_id)
    assert "its job unclaimed since" in found.detail


def test_a_flow_in_flight_is_left_alone_unless_strict(database, sql_board, sql_backend):
    flow_id = _flow(sql_board, sql_backend, reservation_id="r-3")
    _set_flow(database, flow_id, tf_states.RUNNING, age=dt.timedelta(seconds=5))
    _lose_jobs(database, flow_id)  # lost a moment ago: its keep-alive posts it again
    assert _run(database, sql_board).clean
    assert _run(database, sql_board, flow_grace=2).of_kind("stranded_flow")
    _only(_run(database, sql_board, strict=True), "stranded_flow", flow_id)


def test_finished_and_other_boards_flows_are_not_judged(database, sql_board, sql_backend):
    from fleetflow.engine.jobboard.sql import SqlJobBoard

    done = _flow(sql_board, sql_backend, reservation_id="r-4")
    _set_flow(database, done, tf_states.SUCCESS)
    _lose_jobs(database, done)
    other = SqlJobBoard("another-cloud", {}, database, persistence=sql_backend)
    other.connect()
    theirs = _flow(other, sql_backend, reservation_id="r-5")
    _set_flow(database, theirs, tf_states.SUSPENDED)
    report = _run(database, sql_board, strict=True)
    assert report.clean, report.summary()
    # Its own board's audit judges it.
    assert _run(database, other).clean  # its job was posted a moment ago
    _lose_jobs(database, theirs)
    _only(_run(database, other), "stranded_flow", theirs)


def test_without_a_board_the_job_part_is_skipped_and_said(database, sql_board, sql_backend):
    flow_id = _flow(sql_board, sql_backend, reservation_id="r-6")
    _set_flow(database, flow_id, tf_states.SUSPENDED)
    _lose_jobs(database, flow_id)
    report = _run(database, None, strict=True)
    assert report.clean and report.counts["jobboard"] == 0, report.summary()
    assert "jobs" not in report.counts


def test_an_unreachable_board_is_said_too(database, sql_board, sql_backend, monkeypatch):
    monkeypatch.setattr(audit_flows, "list_jobs", lambda board, database: (
        _ for _ in ()).throw(ConnectionError("the board is down")))
    report = _run(database, sql_board)
    assert report.clean
    assert (report.counts["jobboard"], report.counts["jobboard_unreachable"]) == (0, 1)


def _intent(database, age, **store):
    flow_id = ids.new_uuid()
    with database.session() as session:
        intents.add(session, flow_id=flow_id, board="fleetflow", flow_name="provision",
                    flow_module="fleetflow.flows.provision", flow_kwargs={}, store=store,
                    owner_tenant="t1", on_error="revert")
        session.execute(sa.update(intents.FlowIntent).where(
            intents.FlowIntent.flow_id == flow_id).values(created_at=_now() - age))
    return flow_id


def test_an_intent_never_materialized_is_stranded_after_the_grace(database, sql_board):
    old = _intent(database, LONG_AGO, reservation_id="r-7")
    _intent(database, dt.timedelta(seconds=1), reservation_id="r-8")  # its submitter's now
    for board in (sql_board, None):  # no board needed for that part
        found = _only(_run(database, board), "stranded_flow", old)
        assert found.detail.startswith("provision on reservation r-7: submitted, never "
                                       "started (committed ")
    assert _run(database, sql_board).counts["unstarted_intents"] == 1


def test_an_intent_whose_flow_was_saved_is_judged_as_a_flow(database, sql_board,
                                                            sql_backend):
    flow_id = _flow(sql_board, sql_backend, reservation_id="r-9")
    with database.session() as session:  # saved and posted, the mark lost
        intents.add(session, flow_id=flow_id, board=sql_board.name, flow_name="toy-linear",
                    flow_module=__name__, flow_kwargs={}, store={}, owner_tenant=None,
                    on_error="revert")
        session.execute(sa.update(intents.FlowIntent).values(created_at=_now() - LONG_AGO))
    report = _run(database, sql_board)
    assert report.clean and report.counts["unstarted_intents"] == 0, report.summary()


# -- statuses ------------------------------------------------------------------------------

def test_building_with_its_flow_over_is_a_status_mismatch(database, sql_board, sql_backend):
    reservation_id, flow_id = _provisioned(database, sql_board, sql_backend,
                                           states.BUILDING, [states.ACTIVE] * 3,
                                           tf_states.SUCCESS)
    found = _only(_run(database, sql_board), "status_mismatch", reservation_id)
    assert found.detail == (f"reservation BUILDING but its flow {flow_id} is SUCCESS "
                            "(3 ACTIVE)")


def test_a_finished_reservation_audits_clean(database, sql_board, sql_backend):
    _provisioned(database, sql_board, sql_backend, states.ACTIVE, [states.ACTIVE] * 3,
                 tf_states.SUCCESS)
    _provisioned(database, sql_board, sql_backend, states.REVERTED, [states.REVERTED] * 2,
                 tf_states.REVERTED)
    # A server deleted on its own leaves its reservation ACTIVE.
    _reservation(database, states.ACTIVE, [states.ACTIVE, states.DELETED])
    _reservation(database, states.DELETED, [states.DELETED, states.REVERTED])
    report = _run(database, sql_board, strict=True)
    assert report.clean, report.summary()
    assert report.counts["reservations"] == 3  # a REVERTED one has nothing to disagree with


def test_a_reservation_in_flight_is_left_alone(database, sql_board, sql_backend):
    # Every instance is ACTIVE and the last atom is about to write ACTIVE.
    reservation_id, flow_id = _provisioned(database, sql_board, sql_backend,
                                           states.BUILDING, [states.ACTIVE] * 2,
                                           tf_states.RUNNING)
    _set_flow(database, flow_id, tf_states.RUNNING, age=dt.timedelta(seconds=1))
    [job] = list(sql_board.iterjobs())
    sql_board.claim(job, "conductor-1", expiry=600)
    assert _run(database, sql_board).clean
    # Still building: not every instance has settled.
    _reservation(database, states.BUILDING, [states.ACTIVE, states.BUILDING])
    assert _run(database, sql_board).clean


def test_a_reservation_without_its_flow_detail_is_judged_by_its_rows(database):
    quiet = _reservation(database, states.BUILDING, [states.ACTIVE, states.ERROR])
    _reservation(database, states.BUILDING, [states.ACTIVE] * 2, age=dt.timedelta(0))
    found = _only(_run(database), "status_mismatch", quiet)
    assert "every instance has settled (1 ACTIVE, 1 ERROR); no change since" in found.detail


@pytest.mark.parametrize("status, instances, expected", [
    (states.ACTIVE, [states.ACTIVE, states.ERROR, states.REVERTED],
     "reservation ACTIVE but 2 of 3 instances are not (1 ERROR, 1 REVERTED)"),
    (states.DELETED, [states.DELETED, states.ACTIVE],
     "reservation DELETED but 1 of 2 instances are not gone (1 ACTIVE)"),
    (states.DELETING, [states.DELETED, states.DELETED],
     "reservation DELETING but every instance is gone (2 DELETED)"),
])
def test_a_settled_reservation_disagreeing_with_its_instances(database, status, instances,
                                                              expected):
    reservation_id = _reservation(database, status, instances)
    assert _only(_run(database), "status_mismatch", reservation_id).detail.startswith(
        expected)


def _vcluster(database, status, members, flow_id=None):
    """A vcluster with ``members``: ``[(name, kind, resource status)]``."""
    vcluster_id = ids.new_uuid()
    with database.session() as session:
        session.add(VCluster(id=vcluster_id, tenant_id="t1", name="vc", status=status,
                             flow_id=flow_id, request={}, runs=[]))
        session.flush()
        for index, (name, kind, member_status) in enumerate(members):
            resource_id = ids.new_uuid()
            if kind == states.MEMBER_SERVER:
                session.add(Instance(id=resource_id, tenant_id="t1", name=name,
                                     status=member_status, flavor_id="1", image_id="i",
                                     vcluster_id=vcluster_id))
            else:
                session.add(Volume(id=resource_id, tenant_id="t1", size_gb=1,
                                   status=member_status, vcluster_id=vcluster_id))
            session.add(VClusterMember(vcluster_id=vcluster_id, name=name, kind=kind,
                                       index=index, resource_id=resource_id, spec={}))
    return vcluster_id


SERVER, VOLUME = states.MEMBER_SERVER, states.MEMBER_VOLUME


def test_vcluster_statuses(database, sql_board, sql_backend):
    healthy = [("db", SERVER, states.ACTIVE), ("data", VOLUME, states.VOLUME_AVAILABLE),
               ("scratch", VOLUME, states.VOLUME_CREATING)]  # being added
    _vcluster(database, states.ACTIVE, healthy)
    _vcluster(database, states.DELETED, [("db", SERVER, states.DELETED),
                                         ("data", VOLUME, states.VOLUME_DELETED)])
    assert _run(database, sql_board).clean
    broken = _vcluster(database, states.ACTIVE, [("db", SERVER, states.ERROR),
                                                 ("data", VOLUME, states.VOLUME_AVAILABLE)])
    assert _only(_run(database, sql_board), "status_mismatch", broken).detail == (
        "vcluster ACTIVE but member db (server) is ERROR")


def test_a_deleted_vcluster_with_a_live_member(database):
    vcluster_id = _vcluster(database, states.DELETED, [
        ("db", SERVER, states.DELETED), ("data", VOLUME, states.VOLUME_AVAILABLE)])
    assert _only(_run(database), "status_mismatch", vcluster_id).detail == (
        "vcluster DELETED but member data (volume) is AVAILABLE")


def test_a_vcluster_updating_after_its_flow_ended(database, sql_board, sql_backend):
    vcluster_id = ids.new_uuid()
    flow_id = _flow(sql_board, sql_backend, vcluster_id=vcluster_id)
    _set_flow(database, flow_id, tf_states.SUCCESS)
    _lose_jobs(database, flow_id)
    busy = _vcluster(database, states.UPDATING, [("db", SERVER, states.ACTIVE)], flow_id)
    assert _only(_run(database, sql_board), "status_mismatch", busy).detail == (
        f"vcluster UPDATING but its flow {flow_id} is SUCCESS")


def _evacuation(database, status, flow_id):
    evacuation_id = ids.new_uuid()
    with database.session() as session:
        session.add(Evacuation(id=evacuation_id, hosts=["h1"], mode=states.MODE_REBUILD,
                               status=status, flow_id=flow_id, runs=[flow_id]))
    return evacuation_id


def test_evacuation_statuses(database, sql_board, sql_backend):
    running = _flow(sql_board, sql_backend, evacuation_id="e-1")
    _set_flow(database, running, tf_states.RUNNING, age=dt.timedelta(seconds=1))
    [job] = list(sql_board.iterjobs())
    sql_board.claim(job, "conductor-1", expiry=600)
    _evacuation(database, states.RUNNING, running)
    over = _flow(sql_board, sql_backend, evacuation_id="e-2")
    _set_flow(database, over, tf_states.REVERTED)
    _lose_jobs(database, over)
    _evacuation(database, states.REVERTED, over)
    report = _run(database, sql_board)
    assert report.clean and report.counts["evacuations_busy"] == 1, report.summary()
    stuck = _evacuation(database, states.RUNNING, over)
    assert _only(_run(database, sql_board), "status_mismatch", stuck).detail == (
        f"evacuation RUNNING but its flow {over} is REVERTED")


def test_a_row_in_progress_whose_flow_failed_is_a_stranded_operation(database, sql_board,
                                                                      sql_backend):
    vcluster_id = ids.new_uuid()
    flow_id = _flow(sql_board, sql_backend, vcluster_id=vcluster_id)
    _set_flow(database, flow_id, tf_states.FAILURE)
    _lose_jobs(database, flow_id)
    reverting = _vcluster(database, states.REVERTING, [("db", SERVER, states.REVERTING)],
                          flow_id)
    found = _only(_run(database, sql_board), "stranded_operation", reverting)
    assert found.detail.startswith(f"vcluster REVERTING but its flow {flow_id} ended "
                                   "FAILURE half way")
    assert f"'fleetflow flows revert {flow_id}'" in found.detail
    failed = _flow(sql_board, sql_backend, evacuation_id="e-3")
    _set_flow(database, failed, tf_states.FAILURE)
    _lose_jobs(database, failed)
    running = _evacuation(database, states.RUNNING, failed)
    report = _run(database, sql_board)
    assert {(m.kind, m.subject) for m in report.mismatches} == {
        ("stranded_operation", reverting), ("stranded_operation", running)}
    assert "stranded_operation" in KINDS


def test_a_row_that_moves_on_while_audited_is_not_reported(database, sql_board, sql_backend,
                                                           monkeypatch):
    """Read BUILDING, its flow then read SUCCESS: the row is read again before reporting."""
    from fleetflow.services.audit import status as audit_status

    reservation_id, _ = _provisioned(database, sql_board, sql_backend, states.BUILDING,
                                     [states.ACTIVE], tf_states.SUCCESS)
    real = audit_status._vcluster_members

    def meanwhile(session):  # runs after the reservations were read
        with database.session() as other:
            other.execute(sa.update(Reservation).values(status=states.ACTIVE))
        return real(session)

    monkeypatch.setattr(audit_status, "_vcluster_members", meanwhile)
    report = _run(database, sql_board)
    assert report.clean, report.summary()
    with database.session() as session:
        assert session.get(Reservation, reservation_id).status == states.ACTIVE


def test_the_grace_follows_the_configuration(engine_conf):
    assert audit_flows.grace(True) == 0.0
    assert audit_flows.grace(True, 30) == 30.0
    assert audit_flows.grace(False) == audit_flows.DEFAULT_GRACE
    engine_conf.set_override("reconcile_interval", 40, group="conductor")
    assert audit_flows.grace(False, conf=engine_conf) == 120.0
