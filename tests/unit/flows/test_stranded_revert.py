"""A revert cut short: unanswered undo calls, the stranded operation, the operator's revert.

A host that answers too late (past the RPC timeout) leaves its caller with
an unknown outcome. In a revert that raised, and a revert that raises ends
the flow FAILURE half way, with the operation still REVERTING (or BUILDING)
and everything the atoms before it hold still held. Undo calls are
idempotent, so they are sent again; when the host stays silent, the
operation is stranded: no conductor runs a FAILURE flow again, the audit
says so, and the operator's revert (or resume) finishes it.

Answers are lost where a busy host loses them: the host does the work, the
caller hears nothing (``LostAnswers``).
"""

from __future__ import annotations

import pytest
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.compute.exceptions import OutcomeUnknown
from fleetflow.engine import actions, taskflow_retry_fix
from fleetflow.engine.jobboard.boards import make_jobboard
from fleetflow.engine.submit import Submitter
from fleetflow.persistence.logbook.backend import LogbookBackend
from fleetflow.persistence.models import Reservation
from fleetflow.services.audit.report import audit
from fleetflow.services.reservations import ReservationOps, ReservationRequest
from fleetflow.services.vclusters import VClusterOps, VClusterRequest
from tests.unit.flows import conductors as conductor_threads

# Two servers apart, each with its volume beside it (the second example of docs/vcluster.md).
TWO_SERVERS_APART = {
    "instances": [
        {"name": "db-server-1", "type": "server",
         "spec": {"imageRef": "cirros", "flavorRef": "m1.small"}},
        {"name": "db-vol-1", "type": "volume", "spec": {"size": 10}},
        {"name": "db-server-2", "type": "server",
         "spec": {"imageRef": "cirros", "flavorRef": "m1.small"}},
        {"name": "db-vol-2", "type": "volume", "spec": {"size": 10}}],
    "groupings": [
        {"name": "group-1", "membersRef": ["db-server-1", "db-vol-1"],
         "spec": {"rule": "affinity"}},
        {"name": "group-2", "membersRef": ["db-server-2", "db-vol-2"],
         "spec": {"rule": "affinity"}},
        {"name": "group-3", "membersRef": ["db-server-1", "db-server-2"],
         "spec": {"rule": "anti-affinity"}},
        {"name": "group-4", "membersRef": ["db-vol-1", "db-vol-2"],
         "spec": {"rule": "anti-affinity"}}],
}
EVERY = 1_000_000


class LostAnswers:
    """The compute client's ``call``, losing the answers of ``method``: the host does
    the work and the caller gets OutcomeUnknown, ``per_key`` times per ``key``
    argument (the volume, the server), then answers come through. ``on`` False
    mends it."""

    def __init__(self, compute, method: str, key: str, per_key: int):
        self._call = compute.call
        self.method, self.key, self.per_key = method, key, per_key
        self.lost: dict[str, int] = {}
        self.on = True

    def __call__(self, host, method, timeout=None, **kwargs):
        answer = self._call(host, method, timeout=timeout, **kwargs)
        if self.on and method == self.method:
            key = kwargs[self.key]
            if self.lost.get(key, 0) < self.per_key:
                self.lost[key] = self.lost.get(key, 0) + 1
                raise OutcomeUnknown(f"{method} on host {host}: no answer (test)", host=host,
                                     method=method)
        return answer


def lose_answers(cloud, monkeypatch, method: str, key: str, per_key: int) -> LostAnswers:
    lost = LostAnswers(cloud.runtime.compute, method, key, per_key)
    monkeypatch.setattr(cloud.runtime.compute, "call", lost)
    return lost


def fail_every_create(cloud) -> None:
    for backend in cloud.driver.backends:
        cloud.driver.set_backend_faults(backend, fail_next_creates=EVERY)


def mend_creates(cloud) -> None:
    for backend in cloud.driver.backends:
        cloud.driver.set_backend_faults(backend, fail_next_creates=0)


@pytest.fixture
def conductors(evac_cloud):
    """``(board, backend, run_until)``: conductor threads on the SQL board and
    fleetflow's logbook on the cloud's database, as ``fleetflow serve`` runs them."""
    taskflow_retry_fix.apply()
    cloud = evac_cloud
    # Each test runs under both engines (tests/unit/flows/conftest.py).
    cloud.conf.set_override("engine", cloud.engine, group="conductor")
    backend = LogbookBackend({"connection": cloud.database.url}, engine=cloud.database.engine)
    board = make_jobboard(cloud.conf, backend)

    run_until = conductor_threads.runner(cloud, board, backend, timeout=120)

    yield board, backend, run_until
    board.close()


def create_vcluster(cloud, board, backend):
    ops = VClusterOps(cloud.conf, cloud.database, submit=Submitter(board, backend))
    vcluster, created = ops.create(VClusterRequest(
        tenant_id="t1", user_id="u1", name="db", instances=TWO_SERVERS_APART["instances"],
        groupings=TWO_SERVERS_APART["groupings"]))
    assert created
    return vcluster.id, vcluster.flow_id, ops


def reserve_failing_undone(cloud, board, backend, monkeypatch):
    """``(lost, reservation)``: a reservation of one whose every boot fails and whose
    guests' destroys go unanswered (``lost.on = False`` answers them again)."""
    lost = lose_answers(cloud, monkeypatch, "destroy_instance", "uuid", per_key=EVERY)
    for host in cloud.driver.hosts:
        cloud.driver.set_faults(host, fail_next=EVERY)
    ops = ReservationOps(cloud.conf, cloud.database, submit=Submitter(board, backend))
    reservation, _ = ops.reserve(ReservationRequest(
        tenant_id="t1", user_id="u1", flavor_ref="m1.small", image_ref="cirros",
        min_count=1, max_count=1))
    return lost, reservation


def strict_audit(cloud, board):
    return audit(cloud.database, cloud.runtime.placement, cloud.runtime.compute,
                 strict=True, board=board)


def assert_cluster_reverted(cloud, board, ops, vcluster_id) -> None:
    """The cluster REVERTED, none of its members holding an allocation, the audit clean."""
    view = ops.show(None, vcluster_id)
    assert view["status"] == states.REVERTED
    for member in view["instances"]:
        assert cloud.runtime.placement.get_allocations(member["id"]).allocations == {}
    report = strict_audit(cloud, board)
    assert report.clean, report.summary()


def test_a_delete_whose_answer_is_lost_is_sent_again_and_the_run_reverts(
        evac_cloud, conductors, monkeypatch):
    """Every volume create fails, so each failed create is undone (its chain tries
    the next backend) and at last the whole run is: the first delete of each
    volume goes unanswered."""
    board, backend, run_until = conductors
    fail_every_create(evac_cloud)
    lost = lose_answers(evac_cloud, monkeypatch, "delete_volume", "volume_id", per_key=1)
    vcluster_id, flow_id, ops = create_vcluster(evac_cloud, board, backend)

    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.REVERTED
    assert len(lost.lost) == 2  # each volume's delete went unanswered once
    view = ops.show(None, vcluster_id)
    assert view["status"] == states.REVERTED
    assert {m["status"] for m in view["instances"]} == {states.REVERTED,
                                                         states.VOLUME_DELETED}
    mend_creates(evac_cloud)
    report = strict_audit(evac_cloud, board)
    assert report.clean, report.summary()


def test_a_teardown_whose_detach_answer_is_lost_sends_it_again(evac_cloud, conductors,
                                                                monkeypatch):
    """A teardown is never reverted: one of its calls raising pauses it for an
    operator (on_error pause), and the cluster stays DELETING."""
    board, backend, run_until = conductors
    vcluster_id, flow_id, ops = create_vcluster(evac_cloud, board, backend)
    assert run_until(flow_id, tf_states.SUCCESS, tf_states.REVERTED) == tf_states.SUCCESS
    lost = lose_answers(evac_cloud, monkeypatch, "detach_volume", "volume_id", per_key=1)
    teardown_id = ops.delete(None, vcluster_id).flow_id

    assert run_until(teardown_id, tf_states.SUCCESS, actions.PAUSED) == tf_states.SUCCESS
    assert len(lost.lost) == 2
    assert ops.show(None, vcluster_id)["status"] == states.DELETED
    report = strict_audit(evac_cloud, board)
    assert report.clean, report.summary()


def test_a_vcluster_whose_revert_raised_is_stranded_until_the_operator_reverts_it(
        evac_cloud, conductors, monkeypatch):
    board, backend, run_until = conductors
    fail_every_create(evac_cloud)
    # The hosts never answer a delete: the first volume create undone raises.
    lost = lose_answers(evac_cloud, monkeypatch, "delete_volume", "volume_id", per_key=EVERY)
    vcluster_id, flow_id, ops = create_vcluster(evac_cloud, board, backend)

    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.FAILURE
    assert ops.show(None, vcluster_id)["status"] == states.REVERTING
    flow = actions.show_flow(backend, flow_id)
    assert any(a["state"] == tf_states.REVERT_FAILURE for a in flow["atoms"]), flow["atoms"]
    report = strict_audit(evac_cloud, board)
    [stranded] = report.of_kind("stranded_operation")
    assert stranded.subject == vcluster_id
    assert f"flow {flow_id} ended FAILURE" in stranded.detail
    assert not [m for m in report.of_kind("status_mismatch") if m.subject == vcluster_id]

    lost.on = False  # the hosts answer again
    mend_creates(evac_cloud)
    actions.revert(board, backend, flow_id)
    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.REVERTED
    assert_cluster_reverted(evac_cloud, board, ops, vcluster_id)


def test_a_reservation_whose_revert_raised_is_stranded_until_the_operator_resumes_it(
        evac_cloud, conductors, monkeypatch):
    board, backend, run_until = conductors
    cloud = evac_cloud
    # Its one instance boots, then the reservation reverts (all or nothing, and
    # the second instance finds no host): the destroy of the booted guest is
    # never answered, however often it is sent.
    lost, reservation = reserve_failing_undone(cloud, board, backend, monkeypatch)
    flow_id = reservation.flow_id

    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.FAILURE
    report = strict_audit(cloud, board)
    assert [m.subject for m in report.of_kind("stranded_operation")] == [reservation.id]

    lost.on = False
    for host in cloud.driver.hosts:
        cloud.driver.set_faults(host, fail_next=0)
    # Resumed, the revert that raised runs again, and the instance's chain
    # carries on where it was: its next host, healthy now.
    actions.resume(board, backend, flow_id)
    assert run_until(flow_id, tf_states.SUCCESS, tf_states.REVERTED,
                     tf_states.FAILURE) == tf_states.SUCCESS
    with cloud.database.session() as session:
        assert session.get(Reservation, reservation.id).status == states.ACTIVE
    report = strict_audit(cloud, board)
    assert report.clean, report.summary()
