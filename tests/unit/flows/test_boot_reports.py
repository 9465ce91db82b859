"""Boots with build reports: what the boot task does when a report does not come."""

from concurrent import futures

import pytest
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.compute.exceptions import BuildFailed, OutcomeUnknown
from fleetflow.engine import engines
from fleetflow.flows.tasks.boot import BootInstance
from fleetflow.persistence import reservations as rows


def _instances(cloud, rid):
    with cloud.database.session() as s:
        return [(i.id, i.host, i.status) for i in rows.instances(s, rid)]


@pytest.fixture(autouse=True)
def patched_engines():
    engines.engine_options()  # the engine's pool starts boots without a thread


def test_boots_use_build_reports_by_default(cloud, monkeypatch):
    compute = cloud.runtime.compute
    sent = []
    real = compute.start_build
    monkeypatch.setattr(compute, "start_build", lambda *a, **k: sent.append(a[1]) or real(*a, **k))
    rid, job = cloud.reserve(3)
    assert cloud.run(job) == tf_states.SUCCESS
    assert sorted(sent) == sorted(uuid for uuid, _, _ in _instances(cloud, rid))
    assert {status for *_, status in _instances(cloud, rid)} == {states.ACTIVE}


def test_a_lost_report_is_settled_by_asking_the_host(cloud, monkeypatch):
    compute = cloud.runtime.compute
    real = compute.start_build

    def report_lost(*args, **kwargs):
        real(*args, **kwargs).result(10)  # the host did build it
        lost = futures.Future()
        lost.set_exception(OutcomeUnknown("no report within the timeout"))
        return lost

    monkeypatch.setattr(compute, "start_build", report_lost)
    rid, job = cloud.reserve(3)
    assert cloud.run(job) == tf_states.SUCCESS
    for uuid, host, status in _instances(cloud, rid):
        assert status == states.ACTIVE
        assert cloud.driver.spawn_count(uuid) == 1  # asked, not built again
        assert compute.get_instance(host, uuid)["state"] == states.ACTIVE


def test_a_reported_failure_is_written_on_the_instance_and_raised(cloud):
    host = sorted(cloud.driver.hosts)[0]
    cloud.driver.set_faults(host, fail_next=1)
    rid, job = cloud.reserve(1)
    uuid = _instances(cloud, rid)[0][0]
    task = BootInstance("inst-0000-boot")
    args = {"instance_uuids": [uuid], "index": 0, "host": host,
            "request_spec": {"resources": {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}}}
    assert task.can_start()
    started = task.start(**args)
    with pytest.raises(BuildFailed):
        task.finish(started, **args)
    with cloud.database.session() as s:
        fault = rows.instance_views(s, rid)[0]["fault"]
    assert (fault["step"], fault["host"]) == ("boot", host)
