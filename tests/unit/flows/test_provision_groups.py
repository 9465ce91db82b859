"""The provision flow built in groups of instances ([conductor] instances_per_atom).

The same outcomes as one chain an instance (test_provision_flow.py), from a
flow of one task a group: each member walks its hosts itself, and a group run
again (after a crash, an outage) resumes every member from its row.
"""

import pytest
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.common.crash_points import BEFORE_EXECUTE
from fleetflow.flows.provision import batch
from fleetflow.flows.provision.flow import provision_flow
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.fleet import stable_uuid
from tests.unit.flows import test_provision_flow as chains
from tests.unit.flows.test_provision_flow import _allocations, _instances, _status


@pytest.fixture
def cloud(fleetflow_cloud):
    fleetflow_cloud.conf.set_override("instances_per_atom", 2, group="conductor")
    return fleetflow_cloud


def test_a_reservation_larger_than_a_group_gets_one_task_a_group(cloud):
    _rid, job = cloud.reserve(5)
    assert job["kwargs"]["batch"] == 2
    flow = provision_flow(**job["kwargs"])
    unordered = next(n for n, _ in flow.iter_nodes() if n.name == "instances")
    assert [(a.name, a.first, a.last) for a, _ in unordered.iter_nodes()] == [
        ("batch-0000", 0, 2), ("batch-0002", 2, 4), ("batch-0004", 4, 5)]
    assert flow.requires <= set(job["store"]) | {"fence"}
    # One a group is the limit, not the rule: two instances keep their chains.
    _rid, small = cloud.reserve(2)
    assert "batch" not in small["kwargs"]


def test_every_member_goes_active_with_one_allocation_and_one_spawn(cloud):
    rid, job = cloud.reserve(5)
    assert cloud.run(job) == tf_states.SUCCESS
    assert _status(cloud, rid) == (states.ACTIVE, None)
    for uuid, host, status, attempts, tried, _fault in _instances(cloud, rid):
        assert (status, attempts, tried) == (states.ACTIVE, 1, [host])
        assert list(_allocations(cloud, uuid)) == [stable_uuid(host)]
        assert cloud.driver.spawn_count(uuid) == 1
        assert cloud.runtime.compute.get_instance(host, uuid)["state"] == states.ACTIVE


def test_a_member_whose_build_fails_moves_on_and_leaves_nothing_behind(cloud):
    cloud.driver.set_faults("z1-r1-h01", fail_next=100)
    rid, job = cloud.reserve(3, capabilities={"gpu": "true"})
    assert cloud.run(job) == tf_states.SUCCESS
    assert _status(cloud, rid)[0] == states.ACTIVE
    for uuid, host, _state, attempts, tried, fault in _instances(cloud, rid):
        assert host != "z1-r1-h01" and fault is None and tried[-1] == host
        assert attempts == len(tried)
        assert list(_allocations(cloud, uuid)) == [stable_uuid(host)]
        assert cloud.runtime.compute.get_instance("z1-r1-h01", uuid) is None
        assert cloud.driver.spawn_count(uuid) == 1


def test_all_or_nothing_reverts_every_group(cloud):
    # The chains' scenario, on 3 instances: groups of 2 and 1 here.
    chains.test_all_or_nothing_reverts_everything(cloud)


def test_best_effort_keeps_what_booted(cloud):
    chains.test_best_effort_keeps_what_booted(cloud)


def test_group_rule_holds_across_groups(cloud):
    chains.test_group_membership_follows_the_instances(cloud)


def test_a_group_stopped_mid_run_resumes_each_member_from_its_row(cloud,
                                                                  fleetflow_crash_points):
    rid, job = cloud.reserve(4)
    # The second group stops before it runs; the first one finished.
    fleetflow_crash_points.arm("batch-0002", BEFORE_EXECUTE, stop=True)
    cloud.run(job)
    done = {i[0]: i for i in _instances(cloud, rid)}
    assert sum(i[2] == states.ACTIVE for i in done.values()) == 2
    assert cloud.resume(job) == tf_states.SUCCESS
    for uuid, host, status, attempts, _tried, _fault in _instances(cloud, rid):
        assert (status, attempts) == (states.ACTIVE, 1)
        assert cloud.driver.spawn_count(uuid) == 1
        assert list(_allocations(cloud, uuid)) == [stable_uuid(host)]


def test_a_member_run_again_drops_a_claim_its_row_never_recorded(cloud):
    """A crash between a claim and its record leaves an allocation the row does not
    name; the member's next try claims exactly, so nothing is held twice."""
    rid, job = cloud.reserve(1)
    with cloud.database.session() as s:
        uuid = rows.instance_ids(s, rid)[0]
    stray = "z1-r2-h01"
    cloud.runtime.placement.claim(uuid, {stable_uuid(stray): {"VCPU": 1}}, "t1", "t1")
    placements = {"hosts": {"0": ["z1-r1-h02"]}, "host_uuids": {}}
    spec = job["store"]["request_spec"]
    group = batch._Group(placements, spec, "t1", states.ALL_OR_NOTHING, 0, None)
    assert batch.build_member(group, "batch-0000", 0, uuid, None) == "z1-r1-h02"
    assert list(_allocations(cloud, uuid)) == [stable_uuid("z1-r1-h02")]
    # Run again (its row now ACTIVE there): nothing more is built or claimed.
    row = batch._rows([uuid])[uuid]
    assert batch.build_member(group, "batch-0000", 0, uuid, row) == "z1-r1-h02"
    assert cloud.driver.spawn_count(uuid) == 1


def test_a_group_whose_owner_is_fenced_off_stops_without_touching_rows_or_hosts(
        cloud, monkeypatch):
    from fleetflow.common.exceptions import StaleFence
    from fleetflow.persistence.models import Host

    rid, job = cloud.reserve(3, capabilities={"gpu": "true"})
    compute = cloud.runtime.compute
    real_build = compute.ensure_built
    refusals = []

    def refused(host, uuid, *args, **kwargs):
        if host == "z1-r1-h01":
            refusals.append(uuid)
            # What a host answers a conductor that lost the job to another.
            raise StaleFence("host refuses job: token 1 is stale (current 2)")
        return real_build(host, uuid, *args, **kwargs)
    real_build_all = compute.build_all

    def all_refused_there(builds, *args, **kwargs):
        answers = real_build_all([b for b in builds if b["host"] != "z1-r1-h01"],
                                 *args, **kwargs)
        answered = iter(answers)
        refused_there = StaleFence("host refuses job: token 1 is stale (current 2)")
        refusals.extend(b["uuid"] for b in builds if b["host"] == "z1-r1-h01")
        return [(None, refused_there) if b["host"] == "z1-r1-h01" else next(answered)
                for b in builds]
    monkeypatch.setattr(compute, "ensure_built", refused)
    monkeypatch.setattr(compute, "build_all", all_refused_there)
    cloud.run(job)
    assert refusals
    with cloud.database.session() as session:
        failures = {h.name: h.build_failures for h in session.query(Host)}
    # Not a failure of the host: its count is untouched, no row names it in a fault,
    # and no member moved on to try another host.
    assert failures["z1-r1-h01"] == 0, failures
    for _uuid, _host, _state, attempts, _tried, fault in _instances(cloud, rid):
        assert fault is None or fault["code"] != StaleFence.code
        assert attempts == 1


def test_a_build_unanswered_in_the_first_wave_is_its_members_to_finish(cloud, monkeypatch):
    from fleetflow.compute.exceptions import OutcomeUnknown

    rid, job = cloud.reserve(3)
    compute = cloud.runtime.compute
    real_build_all = compute.build_all
    unanswered = []

    def first_one_unanswered(builds, *args, **kwargs):
        answers = real_build_all(builds, *args, **kwargs)
        unanswered.append(builds[0]["uuid"])
        # The host did build it: only the answer was lost on the way.
        return [(None, OutcomeUnknown("no answer", host=builds[0]["host"]))] + answers[1:]
    monkeypatch.setattr(compute, "build_all", first_one_unanswered)
    assert cloud.run(job) == tf_states.SUCCESS
    assert unanswered
    for uuid, host, status, attempts, tried, fault in _instances(cloud, rid):
        # Its member asked again on the same host: one spawn, no failure, no move.
        assert (status, attempts, tried, fault) == (states.ACTIVE, 1, [host], None)
        assert cloud.driver.spawn_count(uuid) == 1
