"""Operator actions on the real provision flow: pause on a failed boot, resume, revert.

Conductor threads run the flow (TaskFlow's in-memory logbook, the SQL board on
the cloud's database), with the reservation status listener attached through
the conductor's engine factory, as the conductor will attach it.
"""

from __future__ import annotations

import pytest
from taskflow.persistence import backends as tf_backends

from fleetflow.common import states
from fleetflow.engine import actions, taskflow_retry_fix
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.jobboard.boards import make_jobboard
from fleetflow.persistence import reservations as rows
from tests.unit.flows import conductors as conductor_threads

HOSTS = [f"z1-r{r}-h0{h}" for r in (1, 2) for h in (1, 2, 3)]


@pytest.fixture
def operator(cloud):
    # Conductors reload the flow detail: without the fix its retry's history
    # comes back with a failure's dict as the host (engine/taskflow_retry_fix.py).
    # get_backend installs it; this in-memory backend is made here. Left
    # installed: it is what every process runs with.
    taskflow_retry_fix.apply()
    backend = tf_backends.fetch({"connection": "memory://"})
    board = make_jobboard(cloud.conf, backend)

    run_until = conductor_threads.runner(cloud, board, backend, timeout=60)

    def submit(job):
        return submit_mod.submit(board, backend, job["flow"], job["kwargs"],
                                 store=job["store"], owner_tenant="t1", on_error="pause")

    yield board, backend, submit, run_until
    board.close()
    backend.close()


def _reservation(cloud, rid):
    with cloud.database.session() as session:
        reservation = rows.get(session, rid)
        return reservation.status, [(i.status, i.host) for i in rows.instances(session, rid)]


def _paused_reservation(cloud, operator):
    board, backend, submit, run_until = operator
    # Every host's next boot fails once: the instance tries its candidates and
    # its reschedules, all fail, and that last failure is final.
    for host in HOSTS:
        cloud.driver.set_faults(host, fail_next=1)
    rid, job = cloud.reserve(1)
    flow_id = submit(job)
    assert run_until(flow_id, actions.PAUSED) == actions.PAUSED
    return rid, flow_id


def test_a_failed_boot_pauses_and_resume_boots_it_again(cloud, operator):
    board, backend, _submit, run_until = operator
    rid, flow_id = _paused_reservation(cloud, operator)
    flow = actions.show_flow(backend, flow_id)
    assert flow["paused_at"] == "inst-0000-boot"
    atoms = {a["name"]: a for a in flow["atoms"]}
    assert atoms["inst-0000-boot"]["state"] == "FAILURE"
    assert atoms["inst-0000-claim"]["state"] == "SUCCESS"
    assert _reservation(cloud, rid)[0] == states.PAUSED
    (_, host), = _reservation(cloud, rid)[1]
    uuid = rows_instance_id(cloud, rid)
    assert list(cloud.runtime.placement.get_allocations(uuid).allocations)  # kept

    actions.resume(board, backend, flow_id)
    assert run_until(flow_id, "SUCCESS") == "SUCCESS"
    status, instances = _reservation(cloud, rid)
    assert status == states.ACTIVE and instances == [(states.ACTIVE, host)]  # same host
    assert cloud.driver.spawn_count(uuid) == 1


def test_revert_of_a_paused_reservation_frees_everything(cloud, operator):
    board, backend, _submit, run_until = operator
    rid, flow_id = _paused_reservation(cloud, operator)
    uuid = rows_instance_id(cloud, rid)
    actions.revert(board, backend, flow_id)
    assert run_until(flow_id, "REVERTED") == "REVERTED"
    status, instances = _reservation(cloud, rid)
    assert status == states.REVERTED and {s for s, _ in instances} == {states.REVERTED}
    assert cloud.runtime.placement.get_allocations(uuid).allocations == {}
    for host in HOSTS:
        assert cloud.runtime.compute.get_instance(host, uuid) is None


def test_a_failure_another_host_absorbs_does_not_pause(cloud, operator):
    _board, backend, submit, run_until = operator
    healthy = "z1-r1-h03"
    # Load the healthy gpu host a little so spreading tries a broken one first.
    cloud.runtime.placement.claim("00000000-0000-0000-0000-00000000beef",
                                  {stable_uuid(healthy): {"VCPU": 1}}, "other", "other")
    for host in ("z1-r1-h01", "z1-r1-h02"):
        cloud.driver.set_faults(host, fail_next=5)
    rid, job = cloud.reserve(1, capabilities={"gpu": "true"})
    flow_id = submit(job)

    assert run_until(flow_id, "SUCCESS", actions.PAUSED) == "SUCCESS"
    assert actions.show_flow(backend, flow_id)["paused_at"] is None
    status, instances = _reservation(cloud, rid)
    assert status == states.ACTIVE and instances == [(states.ACTIVE, healthy)]
    with cloud.database.session() as session:
        (instance,) = rows.instances(session, rid)
        assert instance.attempts >= 2 and instance.hosts_tried[0] != healthy


def test_a_failure_with_no_host_left_pauses(cloud, operator):
    _board, backend, submit, run_until = operator
    for host in ("z1-r1-h01", "z1-r1-h02", "z1-r1-h03"):  # every gpu host is broken
        cloud.driver.set_faults(host, fail_next=100)
    rid, job = cloud.reserve(1, capabilities={"gpu": "true"})
    flow_id = submit(job)

    assert run_until(flow_id, "SUCCESS", actions.PAUSED) == actions.PAUSED
    flow = actions.show_flow(backend, flow_id)
    # The retry ran out: the third broken host failed, and no fourth exists.
    assert flow["paused_at"] in ("inst-0000-boot", "inst-0000-retry")
    assert _reservation(cloud, rid)[0] == states.PAUSED
    with cloud.database.session() as session:
        (instance,) = rows.instances(session, rid)
        assert sorted(instance.hosts_tried) == ["z1-r1-h01", "z1-r1-h02", "z1-r1-h03"]


def stable_uuid(host):
    from fleetflow.persistence.fleet import stable_uuid as uuid_of

    return uuid_of(host)


def rows_instance_id(cloud, rid):
    with cloud.database.session() as session:
        (uuid,) = rows.instance_ids(session, rid)
        return uuid


def _provider(host):
    from fleetflow.persistence.fleet import stable_uuid

    return stable_uuid(host)


def test_a_group_out_of_hosts_pauses_and_resume_builds_where_the_last_try_is_held(
        cloud, operator):
    board, backend, submit, run_until = operator
    cloud.conf.set_override("instances_per_atom", 2, group="conductor")
    for host in HOSTS:
        cloud.driver.set_faults(host, fail_next=100)
    rid, job = cloud.reserve(3)
    assert job["kwargs"]["batch"] == 2
    flow_id = submit(job)
    assert run_until(flow_id, actions.PAUSED) == actions.PAUSED
    assert actions.show_flow(backend, flow_id)["paused_at"].startswith("batch-")
    status, instances = _reservation(cloud, rid)
    assert status == states.PAUSED
    with cloud.database.session() as session:
        held = {i.id: i.host for i in rows.instances(session, rid) if i.host}
    assert held  # the member that ran out of hosts keeps its last try
    for uuid, host in held.items():
        assert list(cloud.runtime.placement.get_allocations(uuid).allocations) == [
            _provider(host)]

    for host in HOSTS:
        cloud.driver.set_faults(host, fail_next=0)
    actions.resume(board, backend, flow_id)
    assert run_until(flow_id, "SUCCESS") == "SUCCESS"
    status, instances = _reservation(cloud, rid)
    assert status == states.ACTIVE and {s for s, _ in instances} == {states.ACTIVE}
    with cloud.database.session() as session:
        now = {i.id: i.host for i in rows.instances(session, rid)}
    assert all(now[uuid] == host for uuid, host in held.items())
    for uuid in now:
        assert cloud.driver.spawn_count(uuid) == 1
