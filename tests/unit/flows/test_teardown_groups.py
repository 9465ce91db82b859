"""A reservation deleted in groups of instances ([conductor] instances_per_atom).

The same end as one task an instance: every guest gone from its host, every
claim released, every group membership dropped, every row DELETED and the
reservation with them; a group run again changes nothing, and a member whose
delete fails leaves the group failed with the others deleted.
"""

import pytest
import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.common.crash_points import AFTER_EFFECT
from fleetflow.compute.exceptions import ComputeError
from fleetflow.flows.provision.teardown import teardown_flow
from fleetflow.persistence import groups
from fleetflow.persistence.models import GroupMember
from fleetflow.services.reservations import ReservationOps
from tests.unit.flows.test_provision_flow import _allocations, _instances, _status


@pytest.fixture
def cloud(fleetflow_cloud):
    fleetflow_cloud.conf.set_override("instances_per_atom", 2, group="conductor")
    return fleetflow_cloud


def _built(cloud, count: int, **fields):
    """A reservation of ``count`` ACTIVE instances; ``(its id, {uuid: host})``."""
    rid, job = cloud.reserve(count, **fields)
    assert cloud.run(job) == tf_states.SUCCESS
    return rid, {uuid: host for uuid, host, *_ in _instances(cloud, rid)}


def _delete(cloud, rid):
    """The teardown job the API's DELETE posts."""
    ReservationOps(cloud.conf, cloud.database, submit=cloud.submit).delete_reservation("t1", rid)
    return cloud.posted[-1]


def _assert_gone(cloud, rid, hosts):
    assert _status(cloud, rid)[0] == states.DELETED
    assert {status for _uuid, _host, status, *_ in _instances(cloud, rid)} == {states.DELETED}
    for uuid, host in hosts.items():
        assert cloud.runtime.compute.get_instance(host, uuid) is None
        assert _allocations(cloud, uuid) == {}


def test_a_teardown_larger_than_a_group_gets_one_task_a_group(cloud):
    rid, _hosts = _built(cloud, 5)
    job = _delete(cloud, rid)
    assert job["kwargs"]["batch"] == 2
    flow = teardown_flow(**job["kwargs"])
    deletes = next(n for n, _ in flow.iter_nodes() if n.name == "delete")
    atoms = [a for a, _ in deletes.iter_nodes()]
    assert [a.name for a in atoms] == ["delete-0000", "delete-0002", "delete-0004"]
    assert [a.inject["instance_ids"] for a in atoms] == [
        job["kwargs"]["instance_ids"][0:2], job["kwargs"]["instance_ids"][2:4],
        job["kwargs"]["instance_ids"][4:5]]
    assert flow.requires <= set(job["store"]) | {"fence"}
    # One a group is the limit, not the rule: two instances keep a task each.
    small, _ = _built(cloud, 2)
    assert "batch" not in _delete(cloud, small)["kwargs"]


def test_every_member_is_destroyed_released_and_leaves_its_group(cloud):
    with cloud.database.session() as session:
        group_id = groups.create(session, "t1", "spread", ["anti-affinity"]).id
    rid, hosts = _built(cloud, 5, group_id=group_id)
    assert cloud.run(_delete(cloud, rid)) == tf_states.SUCCESS
    _assert_gone(cloud, rid, hosts)
    with cloud.database.session() as session:
        assert groups.member_count(session, group_id) == 0
        assert session.scalars(sa.select(GroupMember.instance_id).where(
            GroupMember.instance_id.in_(list(hosts)))).all() == []


def test_a_group_run_again_after_its_work_changes_nothing(cloud, fleetflow_crash_points):
    rid, hosts = _built(cloud, 4)
    job = _delete(cloud, rid)
    # The group's work is done and written, but its result is not saved: a
    # conductor that takes the flow over runs the group again.
    fleetflow_crash_points.arm("delete-0002", AFTER_EFFECT, stop=True)
    stopped = cloud.run(job)
    assert stopped != tf_states.SUCCESS
    assert [s for _u, _h, s, *_ in _instances(cloud, rid)][2:] == [states.DELETED] * 2
    assert cloud.resume(stopped) == tf_states.SUCCESS
    _assert_gone(cloud, rid, hosts)


def test_a_member_whose_delete_fails_stops_the_teardown_and_keeps_its_claim(cloud,
                                                                             monkeypatch):
    rid, hosts = _built(cloud, 4)
    failing = sorted(hosts)[1]
    at_once = cloud.driver.destroy_at_once

    def refuse(destroys):
        # The agent's batch answers a refusal for this one guest and destroys the rest.
        done = iter(at_once([d for d in destroys if d["uuid"] != failing]))
        return [ComputeError(f"{d['uuid']}: the host refused") if d["uuid"] == failing
                else next(done) for d in destroys]
    monkeypatch.setattr(cloud.driver, "destroy_at_once", refuse)
    job = _delete(cloud, rid)
    assert cloud.run(job) != tf_states.SUCCESS
    found = {uuid: (status, fault) for uuid, _h, status, _a, _t, fault in _instances(cloud, rid)}
    assert found[failing][0] == states.ERROR
    assert found[failing][1]["step"] == "delete"
    assert "the host refused" in found[failing][1]["message"]
    assert _allocations(cloud, failing) != {}
    assert cloud.runtime.compute.get_instance(hosts[failing], failing) is not None
    # Every other member of the failed group, and of the other group, is gone.
    for uuid in set(hosts) - {failing}:
        assert found[uuid][0] == states.DELETED
        assert _allocations(cloud, uuid) == {}
    assert _status(cloud, rid)[0] != states.DELETED
    # The cause dealt with, the same teardown deletes what is left.
    monkeypatch.setattr(cloud.driver, "destroy_at_once", at_once)
    assert cloud.run(job) == tf_states.SUCCESS
    _assert_gone(cloud, rid, hosts)


def test_the_guests_of_a_group_go_in_one_call_an_agent(cloud, monkeypatch):
    rid, hosts = _built(cloud, 4)
    batches, alone = [], []
    at_once, destroy = cloud.driver.destroy_at_once, cloud.runtime.compute.ensure_destroyed
    monkeypatch.setattr(cloud.driver, "destroy_at_once",
                        lambda destroys: batches.append(len(destroys)) or at_once(destroys))
    monkeypatch.setattr(cloud.runtime.compute, "ensure_destroyed",
                        lambda host, uuid, **kw: alone.append(uuid) or destroy(host, uuid, **kw))
    assert cloud.run(_delete(cloud, rid)) == tf_states.SUCCESS
    _assert_gone(cloud, rid, hosts)
    assert sorted(batches) == [2, 2] and alone == []


def test_an_agent_older_than_batched_destroys_gets_one_call_a_guest(cloud, monkeypatch):
    from fleetflow.compute.agent import ComputeEndpoint

    rid, hosts = _built(cloud, 4)
    monkeypatch.delattr(ComputeEndpoint, "destroy_instances")
    alone, destroy = [], cloud.runtime.compute.ensure_destroyed
    monkeypatch.setattr(cloud.runtime.compute, "ensure_destroyed",
                        lambda host, uuid, **kw: alone.append(uuid) or destroy(host, uuid, **kw))
    assert cloud.run(_delete(cloud, rid)) == tf_states.SUCCESS
    _assert_gone(cloud, rid, hosts)
    assert sorted(alone) == sorted(hosts)
