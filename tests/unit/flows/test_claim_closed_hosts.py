"""Claims lose a host that an evacuation took, or that left ``up``, after the schedule.

The host is closed between the schedule and the claims (the window in which
an evacuation can take it), by wrapping the schedule task; the claims must
then treat it as taken: the instance goes to an alternate, the vcluster
schedules again. Nothing is left on the closed host and the audit is clean.
The real race, an evacuation requested while builds run, is in
tests/functional/test_evacuation_races.py.
"""

from __future__ import annotations

import functools

import pytest
import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.flows.provision import schedule as schedule_tasks
from fleetflow.flows.vcluster import build_tasks as vcluster_tasks
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.fleet import stable_uuid
from fleetflow.persistence.models import Host, Instance
from fleetflow.services.vclusters import VClusterOps, VClusterRequest

HOLDER = "e-000000000001"


def close(cloud, host: str, how: str) -> None:
    values = ({"evacuation_id": HOLDER} if how == "held"
              else {"state": states.HOST_MAINTENANCE})
    with cloud.database.session() as session:
        session.execute(sa.update(Host).where(Host.name == host).values(**values))


def reopen(cloud, host: str) -> None:
    """The test's stand-in evacuation ends, so the audit sees no hold without its row."""
    with cloud.database.session() as session:
        session.execute(sa.update(Host).where(Host.name == host)
                        .values(evacuation_id=None, state=states.HOST_UP))


def close_after_first_schedule(monkeypatch, task_class, pick, how: str, cloud) -> list:
    """Wrap ``task_class.execute``: after its first run, close the host ``pick`` names."""
    closed: list[str] = []
    real = task_class.execute

    @functools.wraps(real)  # TaskFlow reads what the task requires from the signature
    def execute(self, *args, **kwargs):
        answer = real(self, *args, **kwargs)
        if not closed:
            closed.append(pick(answer))
            close(cloud, closed[0], how)
        return answer

    monkeypatch.setattr(task_class, "execute", execute)
    return closed


def on_host(cloud, host: str) -> list[tuple[str, str]]:
    with cloud.database.session() as session:
        return [(i.id, i.status) for i in session.scalars(
            sa.select(Instance).where(Instance.host == host))]


@pytest.mark.parametrize("how", ["held", "maintenance"])
def test_a_reservation_claims_no_host_closed_after_its_schedule(cloud, monkeypatch, how):
    closed = close_after_first_schedule(
        monkeypatch, schedule_tasks.ScheduleInstances,
        lambda answer: answer["hosts"]["0"][0], how, cloud)
    rid, job = cloud.reserve(3)

    assert cloud.run(job) == tf_states.SUCCESS

    host = closed[0]
    with cloud.database.session() as session:
        assert rows.get(session, rid).status == states.ACTIVE
        instances = rows.instances(session, rid)
    assert {i.status for i in instances} == {states.ACTIVE}
    assert all(i.host != host for i in instances)
    # The lost claim was given back and nothing was built there.
    assert on_host(cloud, host) == []
    assert cloud.runtime.placement.usages(provider=stable_uuid(host)).get("VCPU", 0) == 0
    assert cloud.runtime.compute.list_instances(host) == []
    reopen(cloud, host)
    cloud.assert_audit_clean()


def _first_server_host(answer: dict) -> str:
    return answer["hosts"][sorted(answer["hosts"])[0]][0]


@pytest.mark.parametrize("how", ["held", "maintenance"])
def test_a_vcluster_schedules_again_around_a_host_closed_after_its_schedule(
        evac_cloud, monkeypatch, how):
    closed = close_after_first_schedule(
        monkeypatch, vcluster_tasks.ScheduleVCluster, _first_server_host, how, evac_cloud)
    servers = [{"name": name, "type": "server",
                "spec": {"imageRef": "cirros", "flavorRef": "m1.small"}}
               for name in ("a", "b")]
    ops = VClusterOps(evac_cloud.conf, evac_cloud.database, submit=evac_cloud.submit)
    vcluster, _ = ops.create(VClusterRequest(tenant_id="t1", user_id="u1", name="c",
                                             instances=servers, groupings=[]))

    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS

    host = closed[0]
    view = ops.show(None, vcluster.id)
    assert view["status"] == states.ACTIVE
    assert {m["status"] for m in view["instances"]} == {states.ACTIVE}
    assert all(m["host"] != host for m in view["instances"])
    assert on_host(evac_cloud, host) == []
    assert evac_cloud.runtime.compute.list_instances(host) == []
    reopen(evac_cloud, host)
    evac_cloud.assert_audit_clean()


def _first_destination(answer: dict) -> str:
    return answer["hosts"][sorted(answer["hosts"], key=int)[0]][0]


@pytest.mark.parametrize("how", ["held", "maintenance"])
def test_an_evacuation_moves_nothing_onto_a_host_closed_after_its_schedule(
        evac_cloud, monkeypatch, how):
    from fleetflow.flows.evacuate import tasks as evacuation_tasks
    from fleetflow.services.evacuations import EvacuationOps, EvacuationRequest

    source = "z1-r1-h01"
    resources = {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
    servers = []
    for name in ("a", "b"):
        with evac_cloud.database.session() as session:
            session.add(Instance(id=f"00000000-0000-0000-0000-00000000000{name}",
                                 tenant_id="t1", name=name, host=source, status=states.ACTIVE,
                                 flavor_id="1", image_id="8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01"))
        servers.append(f"00000000-0000-0000-0000-00000000000{name}")
        evac_cloud.runtime.placement.claim(servers[-1], {stable_uuid(source): resources},
                                           "t1", "t1")
        evac_cloud.runtime.compute.build_instance(source, servers[-1], resources)
    closed = close_after_first_schedule(
        monkeypatch, evacuation_tasks.ScheduleMoves, _first_destination, how, evac_cloud)
    ops = EvacuationOps(evac_cloud.conf, evac_cloud.database, submit=evac_cloud.submit,
                        compute=evac_cloud.runtime.compute)
    view = ops.evacuate(EvacuationRequest(hosts=[source], mode=states.MODE_LIVE))

    assert evac_cloud.run(evac_cloud.posted[-1]) == tf_states.SUCCESS

    host = closed[0]
    assert ops.show(view["id"])["status"] == states.DONE
    assert on_host(evac_cloud, source) == [] and on_host(evac_cloud, host) == []
    assert evac_cloud.runtime.compute.list_instances(host) == []
    assert evac_cloud.runtime.placement.usages(provider=stable_uuid(host)).get("VCPU", 0) == 0
    reopen(evac_cloud, host)
    evac_cloud.assert_audit_clean()
