"""Builds whose hosts report back: the futures ComputeAPI.start_build returns."""

import threading
import uuid

import pytest

from fleetflow.common.exceptions import StaleFence
from fleetflow.compute import agent as compute_agent
from fleetflow.compute import messaging
from fleetflow.compute.build_reports import BuildReports
from fleetflow.compute.exceptions import BuildFailed, OutcomeUnknown
from fleetflow.compute.rpcapi import ComputeAPI
from fleetflow.persistence.models import Host

INVENTORY = {"VCPU": {"total": 64, "allocation_ratio": 1.0, "reserved": 0},
             "MEMORY_MB": {"total": 65536, "allocation_ratio": 1.0, "reserved": 0}}
SMALL = {"VCPU": 1, "MEMORY_MB": 256}
SERVED = ["b1", "b2", "b3"]


@pytest.fixture(scope="module")
def reports_conf(tmp_path_factory):
    from fleetflow.common import config

    state_dir = tmp_path_factory.mktemp("build-reports")
    conf = config.load(args=[], environ={})
    conf.set_override("state_dir", str(state_dir))
    conf.set_override("connection", f"sqlite:///{state_dir / 'fleetflow.db'}",
                      group="database")
    # Topics of their own: the in-memory transport is shared by the whole process.
    conf.set_override("topic", f"compute-{uuid.uuid4().hex[:8]}", group="messaging")
    conf.set_override("report_topic", f"reports-{uuid.uuid4().hex[:8]}", group="messaging")
    conf.set_override("rpc_timeout", 10, group="messaging")
    conf.set_override("max_concurrent_builds", 100, group="compute")
    yield conf
    messaging.forget_transport(conf)


@pytest.fixture(scope="module")
def reports_db(reports_conf):
    from fleetflow.persistence.db import Database

    database = Database.from_conf(reports_conf)
    database.upgrade()
    with database.session() as session:
        for name in [*SERVED, "nobody"]:
            session.add(Host(uuid=str(uuid.uuid4()), name=name, region="r1", zone="z1",
                             rack="k1", inventory=INVENTORY))
    yield database
    database.dispose()


@pytest.fixture(scope="module")
def fleet(reports_conf, reports_db):
    agent = compute_agent.serve_fleet(reports_conf, reports_db, hosts=SERVED)
    yield agent
    agent.stop()


@pytest.fixture
def api(reports_conf, reports_db, fleet):
    api = ComputeAPI(reports_conf, reports_db)
    yield api
    api.close()


def test_a_build_reports_its_guest(api, fleet):
    guest = api.start_build("b1", "g-1", SMALL).result(timeout=10)
    assert (guest["uuid"], guest["host"], guest["state"]) == ("g-1", "b1", "ACTIVE")
    assert fleet.driver.get_instance("b1", "g-1")["state"] == "ACTIVE"


def test_the_hosts_error_arrives_as_its_own_class(api, fleet):
    fleet.driver.set_faults("b2", fail_next=1)
    failed = api.start_build("b2", "g-fail", SMALL)
    with pytest.raises(BuildFailed) as caught:
        failed.result(timeout=10)
    assert caught.value.details.get("host") == "b2"
    api.start_build("b2", "g-fence", SMALL, fence={"key": "job-1", "token": 3}).result(10)
    stale = api.start_build("b2", "g-fence", SMALL, fence={"key": "job-1", "token": 2})
    with pytest.raises(StaleFence):
        stale.result(timeout=10)


def test_many_builds_at_once_each_settle_with_their_own_guest(api, fleet):
    started = [api.start_build(SERVED[i % 3], f"many-{i}", SMALL) for i in range(150)]
    guests = [future.result(timeout=30) for future in started]
    assert [g["uuid"] for g in guests] == [f"many-{i}" for i in range(150)]
    assert api._build_reports().waiting() == 0


def test_a_repeated_build_spawns_once(api, fleet):
    first = api.start_build("b3", "g-twice", SMALL).result(timeout=10)
    again = api.start_build("b3", "g-twice", SMALL).result(timeout=10)
    assert first["uuid"] == again["uuid"] == "g-twice"
    assert fleet.driver.spawn_count("g-twice") == 1


def test_no_report_within_the_timeout_is_an_unknown_outcome(api, fleet):
    # No agent serves "nobody": the cast is held (as a broker would) and never answered.
    future = api.start_build("nobody", "g-lost", SMALL, timeout=0.3)
    with pytest.raises(OutcomeUnknown, match="no report within the timeout"):
        future.result(timeout=10)
    assert api._build_reports().waiting() == 0


def test_a_report_nobody_waits_for_is_dropped(api, fleet):
    reports = api._build_reports()
    token, future = reports.expect(0.2, "a build")
    with pytest.raises(OutcomeUnknown):
        future.result(timeout=5)
    reports.settle(token, guest={"uuid": "late"})  # after its timeout: ignored
    reports.settle("never-issued", guest={"uuid": "stray"})
    assert isinstance(future.exception(), OutcomeUnknown)


def test_stopping_fails_the_builds_still_waiting(reports_conf, reports_db, fleet):
    api = ComputeAPI(reports_conf, reports_db)
    future = api.start_build("nobody", "g-stop", SMALL, timeout=30)
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    api.close()
    assert done.wait(5)
    with pytest.raises(OutcomeUnknown, match="stopped waiting"):
        future.result()

    reports = BuildReports(reports_conf, api.transport).start()
    reports.stop()
    with pytest.raises(OutcomeUnknown, match="stopped"):
        reports.expect(1, "a build after the stop")


def test_ensure_built_asking_first_finds_the_guest_without_building(api, fleet):
    api.start_build("b1", "g-ask", SMALL).result(timeout=10)
    guest = api.ensure_built("b1", "g-ask", SMALL, ask_first=True)
    assert guest["state"] == "ACTIVE"
    assert fleet.driver.spawn_count("g-ask") == 1
