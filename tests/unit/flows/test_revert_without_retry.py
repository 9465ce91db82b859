"""A revert never needs a value its chain's retry provides.

Under the ``parallel`` engine a retry may be reverted while a task of its
chain is still reverting, and TaskFlow wipes a REVERTED retry's results. A
conductor killed in between leaves the task REVERTING and its retry REVERTED
with no history; the next conductor runs the task's revert again, and a
revert bound to the retry's value (``host``, ``backend``) cannot get it: the
engine fails and the operation is stranded. These tests build that persisted
state from a real run (a revert that raised, so the world still holds what
it must undo), then let a conductor resume it.
"""

from __future__ import annotations

import contextlib

import pytest
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.engine import actions, flow_views, submit
from fleetflow.engine.submit import Submitter
from fleetflow.persistence.models import Reservation
from fleetflow.tests.unit.flows import test_stranded_revert
from fleetflow.tests.unit.flows.test_stranded_revert import (
    EVERY,
    assert_cluster_reverted,
    create_vcluster,
    fail_every_create,
    lose_answers,
    mend_creates,
    reserve_failing_undone,
    strict_audit,
)

conductors = test_stranded_revert.conductors  # the same conductor threads, as a fixture here


def strand_as_a_crash_leaves_it(backend, flow_id: str) -> list[str]:
    """Each failed revert's task REVERTING, its retry REVERTED with its history
    wiped, the rest marked to revert, the flow RUNNING; returns those tasks."""
    detail = actions._load(backend, flow_id)
    atoms = {atom.name: atom for atom in flow_views.atoms(detail)}
    tasks = sorted(name for name, atom in atoms.items()
                   if atom.state == tf_states.REVERT_FAILURE)
    changed = actions._mark_for_revert(detail)
    for task in tasks:
        atoms[task].state, atoms[task].intention = tf_states.REVERTING, tf_states.REVERT
        retry = atoms[task.rsplit("-", 1)[0] + "-retry"]
        retry.state, retry.intention, retry.results = tf_states.REVERTED, tf_states.REVERT, []
        changed += [task, retry.name]
    detail.state = tf_states.RUNNING  # as a killed engine leaves it
    actions._save(backend, detail, changed)
    return tasks


def resume_stranded(board, backend, flow_id: str) -> None:
    with contextlib.closing(backend.get_connection()) as conn:
        book = conn.get_logbook(flow_id)
    submit.post_job(board, book, flow_id)


@pytest.mark.parametrize("lost_call, key, chain", [
    ("delete_volume", "volume_id", "vol-"),
    ("destroy_instance", "uuid", "srv-"),
])
def test_a_vcluster_chain_revert_resumed_after_its_retry_was_reverted_ends_reverted(
        evac_cloud, conductors, monkeypatch, lost_call, key, chain):
    board, backend, run_until = conductors
    fail_every_create(evac_cloud)  # the run reverts; servers were built first
    lost = lose_answers(evac_cloud, monkeypatch, lost_call, key, per_key=EVERY)
    vcluster_id, flow_id, ops = create_vcluster(evac_cloud, board, backend)
    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.FAILURE

    tasks = strand_as_a_crash_leaves_it(backend, flow_id)
    assert tasks and all(task.startswith(chain) for task in tasks), tasks
    lost.on = False
    mend_creates(evac_cloud)
    resume_stranded(board, backend, flow_id)

    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.REVERTED
    assert_cluster_reverted(evac_cloud, board, ops, vcluster_id)


def test_a_provision_chain_revert_resumed_after_its_retry_was_reverted_ends_reverted(
        evac_cloud, conductors, monkeypatch):
    board, backend, run_until = conductors
    cloud = evac_cloud
    lost, reservation = reserve_failing_undone(cloud, board, backend, monkeypatch)
    flow_id = reservation.flow_id
    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.FAILURE

    tasks = strand_as_a_crash_leaves_it(backend, flow_id)
    assert tasks and all(task.startswith("inst-") for task in tasks), tasks
    lost.on = False
    for host in cloud.driver.hosts:
        cloud.driver.set_faults(host, fail_next=0)
    resume_stranded(board, backend, flow_id)

    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.REVERTED
    with cloud.database.session() as session:
        assert session.get(Reservation, reservation.id).status == states.REVERTED
    report = strict_audit(cloud, board)
    assert report.clean, report.summary()


def test_a_move_chain_revert_resumed_after_its_retry_was_reverted_ends_reverted(
        evac_cloud, conductors):
    """A finished move is never undone, also by a revert that lost its retry's
    value: the flow ends REVERTED (the evacuation FAILED), the server where it
    moved."""
    from fleetflow.services.evacuations import EvacuationOps, EvacuationRequest
    from fleetflow.tests.unit.flows.test_evacuate_flow import SOURCE, boot, kill, where

    board, backend, run_until = conductors
    cloud = evac_cloud
    uuid = boot(cloud)
    kill(cloud, SOURCE)
    evacuations = EvacuationOps(cloud.conf, cloud.database,
                                submit=Submitter(board, backend), compute=cloud.runtime.compute)
    view = evacuations.evacuate(EvacuationRequest(hosts=[SOURCE], mode=states.MODE_REBUILD))
    flow_id = evacuations.show(view["id"])["flow_id"]
    assert run_until(flow_id, tf_states.SUCCESS, tf_states.FAILURE) == tf_states.SUCCESS
    destination = where(cloud, uuid)
    assert destination != SOURCE

    detail = actions._load(backend, flow_id)
    atoms = {atom.name: atom for atom in flow_views.atoms(detail)}
    changed = actions._mark_for_revert(detail)
    [move] = [name for name in atoms if name.startswith("srv-") and name.endswith("-move")]
    atoms[move].state = tf_states.REVERTING
    retry = atoms[move.rsplit("-", 1)[0] + "-retry"]
    retry.state, retry.results = tf_states.REVERTED, []
    detail.state = tf_states.RUNNING
    actions._save(backend, detail, changed)
    resume_stranded(board, backend, flow_id)

    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.REVERTED
    assert evacuations.show(view["id"])["status"] == states.FAILED
    assert where(cloud, uuid) == destination
    report = strict_audit(cloud, board)
    assert report.clean, report.summary()
