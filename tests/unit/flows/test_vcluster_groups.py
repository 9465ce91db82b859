"""The vcluster build with its members in groups ([conductor] instances_per_atom).

Every scenario of the per-member chains (test_vcluster_flow.py) runs again
here on a flow of one task a group of two members; then what only groups do:
a group run again resumes each member from its row.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.crash_points import MEMBER_CLAIMED, MEMBER_UNDONE
from fleetflow.flows.vcluster import batch
from fleetflow.flows.vcluster.build import build_flow
from fleetflow.persistence.models import Instance, Volume
from tests.unit.flows import test_vcluster_flow as chains
from tests.unit.flows.grouped import in_groups

# The contract test builds its own flow: the one below checks the grouped shape.
SCENARIOS = {name: test for name, test in vars(chains).items()
             if name.startswith("test_") and "contract" not in name}
globals().update(SCENARIOS)


@pytest.fixture
def evac_cloud(fleetflow_evacuation_cloud):
    return in_groups(fleetflow_evacuation_cloud, "vcluster-build")


def test_a_run_larger_than_a_group_gets_one_task_a_group(fleetflow_evacuation_cloud):
    cloud = fleetflow_evacuation_cloud
    cloud.conf.set_override("instances_per_atom", 2, group="conductor")
    # One a group is the limit, not the rule: two members keep their chains.
    chains.create(cloud, {"instances": [chains.server("a"), chains.volume("b")]}, name="x")
    assert "batch" not in cloud.posted[-1]["kwargs"]
    assert chains.run_last(cloud) == "SUCCESS"
    vcluster_id = chains.create(cloud, chains.TWO_SERVERS_APART)
    job = cloud.posted[-1]
    assert job["kwargs"]["batch"] == 2
    flow = build_flow(**job["kwargs"])
    members = next(n for n, _ in flow.iter_nodes() if n.name == "members")
    tasks = {task.name: ([s["name"] for s in task.servers], [v["name"] for v in task.volumes])
             for task, _ in members.iter_nodes()}
    assert tasks == {"batch-0000": (["db-server-1", "db-server-2"], []),
                     "batch-0002": ([], ["db-vol-1", "db-vol-2"])}
    assert flow.requires <= set(job["store"]) | {"fence"}
    assert cloud.run(job) == "SUCCESS"
    assert chains.show(cloud, vcluster_id)["status"] == states.ACTIVE
    chains.assert_clean(cloud)


def _first_choice(cloud, body: dict, name: str) -> dict:
    dry = chains.ops(cloud).dry_run(chains.VClusterRequest("t1", "u1", "x", body["instances"],
                                                           body.get("groupings", [])))
    return next(i for i in dry["instances"] if i["name"] == name)


def _stopped_in_a_member(cloud, crash_points, body: dict, point: str) -> tuple[str, dict]:
    """A cluster created and its build stopped at ``point`` of its first group."""
    vcluster_id = chains.create(cloud, body)
    job = cloud.posted[-1]
    crash_points.arm("batch-0000", point, stop=True)
    cloud.run(job)
    assert ("batch-0000", point) in crash_points.reached
    return vcluster_id, job


@pytest.mark.parametrize("point", [MEMBER_UNDONE, MEMBER_CLAIMED])
def test_a_group_stopped_after_a_failed_boot_resumes_on_the_alternate(
        evac_cloud, fleetflow_crash_points, point):
    body = {"instances": [chains.server("a"), chains.server("b")],
            "groupings": [chains.grouping("g", ["a", "b"], "anti-affinity")]}
    first = _first_choice(evac_cloud, body, "a")["host"]
    evac_cloud.driver.set_faults(first, fail_next=1)
    vcluster_id, job = _stopped_in_a_member(evac_cloud, fleetflow_crash_points, body, point)
    # The host would build it now: only the row says that try failed.
    evac_cloud.driver.set_faults(first, fail_next=0)
    assert evac_cloud.resume(job) == "SUCCESS"
    found = chains.members(chains.show(evac_cloud, vcluster_id))
    landed = found["a"]["host"]
    assert landed not in (None, first) and landed != found["b"]["host"]
    with evac_cloud.database.session() as session:
        row = session.get(Instance, found["a"]["id"])
        assert row.hosts_tried == [first, landed] and row.attempts == 2
    assert evac_cloud.driver.spawn_count(found["a"]["id"], host=landed) == 1
    chains.assert_clean(evac_cloud)


def test_a_group_stopped_after_a_failed_create_resumes_on_the_alternate_backend(
        evac_cloud, fleetflow_crash_points):
    body = {"instances": [chains.volume("v", volume_type="ssd"), chains.server("s")]}
    first = _first_choice(evac_cloud, body, "v")["backend"]
    evac_cloud.driver.set_backend_faults(first, fail_next_creates=1)
    vcluster_id, job = _stopped_in_a_member(evac_cloud, fleetflow_crash_points, body,
                                            MEMBER_UNDONE)
    with evac_cloud.database.session() as session:
        volume_id = chains.members(chains.show(evac_cloud, vcluster_id))["v"]["id"]
        assert session.get(Volume, volume_id).status == states.VOLUME_ERROR
    evac_cloud.driver.set_backend_faults(first, fail_next_creates=0)
    assert evac_cloud.resume(job) == "SUCCESS"
    found = chains.members(chains.show(evac_cloud, vcluster_id))
    assert found["v"]["backend"] not in (None, first)
    assert found["v"]["status"] == states.VOLUME_AVAILABLE
    assert evac_cloud.driver.volume_create_count(volume_id) == 1
    chains.assert_clean(evac_cloud)


def test_a_group_that_fails_removes_what_its_members_built(evac_cloud, monkeypatch):
    vcluster_id = chains.create(evac_cloud, chains.TWO_SERVERS_APART)
    job = evac_cloud.posted[-1]
    real_try = batch._try

    def fail_the_volumes(run, name, member, where):
        if member.kind == batch.VOLUME:
            # Not a failed try (those move on): a fault of the task itself.
            raise RuntimeError("create broke")
        return real_try(run, name, member, where)
    monkeypatch.setattr(batch, "_try", fail_the_volumes)
    assert evac_cloud.run(job) == "REVERTED"
    view = chains.show(evac_cloud, vcluster_id)
    assert view["status"] == states.REVERTED
    chains.assert_nothing_held(evac_cloud, view)
    with evac_cloud.database.session() as session:
        servers = session.scalars(sa.select(Instance).where(
            Instance.id.in_([m["id"] for m in view["instances"]]))).all()
        assert len(servers) == 2 and {s.status for s in servers} == {states.REVERTED}
    for member in view["instances"]:
        assert all(evac_cloud.driver.get_instance(host, member["id"]) is None
                   for host in evac_cloud.driver.hosts)
    chains.assert_clean(evac_cloud)


def test_a_group_whose_owner_is_fenced_off_stops_without_touching_rows_or_hosts(
        evac_cloud, monkeypatch):
    from fleetflow.common.exceptions import StaleFence
    from fleetflow.persistence.models import Host

    body = {"instances": [chains.server("a"), chains.server("b")],
            "groupings": [chains.grouping("g", ["a", "b"], "anti-affinity")]}
    first = _first_choice(evac_cloud, body, "a")["host"]
    vcluster_id = chains.create(evac_cloud, body)
    compute = evac_cloud.runtime.compute
    real_build, real_build_all = compute.ensure_built, compute.build_all
    refusals = []
    # What a host answers a conductor that lost the job to another.
    stale = StaleFence("host refuses job: token 1 is stale (current 2)")

    def refused(host, uuid, *args, **kwargs):
        if host == first:
            refusals.append(uuid)
            raise stale
        return real_build(host, uuid, *args, **kwargs)

    def all_refused_there(builds, *args, **kwargs):
        answered = iter(real_build_all([b for b in builds if b["host"] != first],
                                       *args, **kwargs))
        refusals.extend(b["uuid"] for b in builds if b["host"] == first)
        return [(None, stale) if b["host"] == first else next(answered) for b in builds]
    monkeypatch.setattr(compute, "ensure_built", refused)
    monkeypatch.setattr(compute, "build_all", all_refused_there)
    evac_cloud.run(evac_cloud.posted[-1])
    assert refusals
    with evac_cloud.database.session() as session:
        assert session.scalars(sa.select(Host.build_failures).where(
            Host.name == first)).one() == 0
        servers = session.scalars(sa.select(Instance).where(
            Instance.vcluster_id == vcluster_id)).all()
    # Not a failure of the host: no row names it in a fault, nobody moved on.
    assert len(servers) == 2
    for row in servers:
        assert row.fault is None or row.fault["code"] != StaleFence.code
        assert row.attempts == 1


def _recording_build_all(cloud, monkeypatch, answer=None) -> list[list[str]]:
    """Every ``build_all`` call's uuids; ``answer(builds, answers)`` may change its answers."""
    compute = cloud.runtime.compute
    real_build_all = compute.build_all
    calls = []

    def recording(builds, *args, **kwargs):
        calls.append([b["uuid"] for b in builds])
        answers = real_build_all(builds, *args, **kwargs)
        return answer(builds, answers) if answer else answers
    monkeypatch.setattr(compute, "build_all", recording)
    return calls


def test_a_groups_servers_are_sent_in_one_call(evac_cloud, monkeypatch):
    calls = _recording_build_all(evac_cloud, monkeypatch)
    vcluster_id = chains.create(evac_cloud, chains.TWO_SERVERS_APART)
    assert chains.run_last(evac_cloud) == "SUCCESS"
    found = chains.members(chains.show(evac_cloud, vcluster_id))
    servers = sorted(m["id"] for m in found.values() if m["type"] == "server")
    assert [sorted(call) for call in calls] == [servers]
    for uuid in servers:
        assert evac_cloud.driver.spawn_count(uuid) == 1
    with evac_cloud.database.session() as session:
        rows = session.scalars(sa.select(Instance).where(Instance.id.in_(servers))).all()
    assert {(r.status, r.attempts, r.fault) for r in rows} == {(states.ACTIVE, 1, None)}
    chains.assert_clean(evac_cloud)


def test_a_build_unanswered_in_the_first_wave_is_its_members_to_finish(
        evac_cloud, monkeypatch):
    from fleetflow.compute.exceptions import OutcomeUnknown

    lost = []

    def first_one_unanswered(builds, answers):
        # The host did build it: only the answer was lost on the way.
        lost.append(builds[0]["uuid"])
        return [(None, OutcomeUnknown("no answer", host=builds[0]["host"]))] + answers[1:]
    _recording_build_all(evac_cloud, monkeypatch, first_one_unanswered)
    vcluster_id = chains.create(evac_cloud, chains.TWO_SERVERS_APART)
    assert chains.run_last(evac_cloud) == "SUCCESS"
    assert lost
    found = {m["id"]: m for m in chains.members(chains.show(evac_cloud, vcluster_id)).values()}
    with evac_cloud.database.session() as session:
        row = session.get(Instance, lost[0])
        # Its member asked the same host again: one spawn, no failure, no move.
        assert (row.status, row.attempts, row.hosts_tried, row.fault) == (
            states.ACTIVE, 1, [found[lost[0]]["host"]], None)
    assert evac_cloud.driver.spawn_count(lost[0]) == 1
    chains.assert_clean(evac_cloud)
