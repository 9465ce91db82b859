"""The audit against a small real cloud: clean when it is, and each mismatch made for real.

Every broken state below is produced with the real parts (placement claims,
builds on the simulated hosts over RPC, rows in the database), then the audit
must report exactly that mismatch and nothing else.
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from taskflow import states as tf_states

from fleetflow.common import ids, states
from fleetflow.persistence import groups
from fleetflow.persistence.models import GroupMember, Instance, Volume
from tests.functional.conftest import AUDIT_FLEET

H1, H2 = "z1-r1-h01", "z1-r1-h02"
SMALL = {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}


def _only(report, kind, subject=None):
    """The report holds exactly one mismatch, of ``kind`` (about ``subject``)."""
    assert [m.kind for m in report.mismatches] == [kind], report.summary()
    if subject is not None:
        assert report.mismatches[0].subject == subject, report.summary()
    return report.mismatches[0]


def _set_instance(cloud, uuid, **values):
    with cloud.database.session() as session:
        session.execute(sa.update(Instance).where(Instance.id == uuid).values(**values))


# -- clean clouds -----------------------------------------------------------------------

def test_a_cloud_built_directly_and_by_flows_audits_clean(small_cloud, assert_audit_clean):
    small_cloud.boot(H1)
    small_cloud.boot("z1-r2-h01")
    assert small_cloud.provision(3) == tf_states.SUCCESS
    assert small_cloud.provision(2, volume_gb=10) == tf_states.SUCCESS
    report = small_cloud.audit()
    assert report.clean, report.summary()
    assert report.summary() == "0 mismatches"
    assert report.counts["hosts"] == report.counts["hosts_asked"] == 4
    assert report.counts["instances"] == 7 and report.counts["guests"] == 7
    assert report.counts["volumes"] == 2 and report.counts["consumers"] == 9
    assert_audit_clean(small_cloud.database, small_cloud.placement, small_cloud.compute)


def test_a_reverted_flow_leaves_a_clean_cloud(small_cloud):
    for host in ("z1-r1-h01", "z1-r1-h02"):
        small_cloud.driver.set_faults(host, fail_next=100)
    # gpu hosts only (rack r1): both fail every build, so the reservation reverts.
    assert small_cloud.provision(2, capabilities={"gpu": "true"}) == tf_states.REVERTED
    report = small_cloud.audit()
    assert report.clean, report.summary()
    assert report.counts["instances"] == 2 and report.counts["guests"] == 0


def test_teardown_of_group_members_leaves_no_stale_membership(small_cloud):
    with small_cloud.database.session() as session:
        gid = groups.create(session, "t1", "spread", ["anti-affinity"]).id
    assert small_cloud.provision(2, group_id=gid) == tf_states.SUCCESS
    assert small_cloud.audit().clean
    with small_cloud.database.session() as session:
        assert groups.member_count(session, gid) == 2


# -- each mismatch, made for real -------------------------------------------------------

def test_an_allocation_nobody_explains_is_leaked(small_cloud):
    stray = ids.new_uuid()
    small_cloud.placement.claim(stray, {small_cloud.host_uuid(H1): SMALL}, "t1", "t1")
    found = _only(small_cloud.audit(), "leaked_allocation", stray)
    assert "VCPU=1" in found.detail


def test_the_clouds_usage_by_others_is_explained_by_its_external_consumer(small_cloud):
    from fleetflow.persistence import cloud_sync

    external = cloud_sync.external_consumer(H1)
    small_cloud.placement.claim(external, {small_cloud.host_uuid(H1): SMALL},
                                cloud_sync.EXTERNAL_OWNER, cloud_sync.EXTERNAL_OWNER,
                                consumer_type=cloud_sync.EXTERNAL_TYPE)
    assert small_cloud.audit().clean


def test_a_deleted_instance_still_holding_resources_is_leaked(small_cloud):
    uuid = small_cloud.boot(H1)
    small_cloud.compute.destroy_instance(H1, uuid)
    _set_instance(small_cloud, uuid, status=states.DELETED)
    _only(small_cloud.audit(), "leaked_allocation", uuid)


def test_a_guest_without_a_row_is_an_orphan(small_cloud):
    uuid = ids.new_uuid()
    small_cloud.compute.build_instance(H2, uuid, SMALL)
    found = _only(small_cloud.audit(), "orphan_guest", uuid)
    assert found.host == H2


def test_a_guest_left_on_the_old_host_is_an_orphan(small_cloud):
    uuid = small_cloud.boot(H1)
    # The instance "moved" to H2 completely (row, allocation, guest) but H1 kept a copy.
    small_cloud.compute.build_instance(H2, uuid, SMALL)
    from fleetflow.persistence.placement.allocations import ANY_GENERATION, ConsumerWrite

    small_cloud.placement.write([ConsumerWrite(uuid, {small_cloud.host_uuid(H2): SMALL},
                                               "t1", "t1", ANY_GENERATION)])
    _set_instance(small_cloud, uuid, host=H2)
    found = _only(small_cloud.audit(), "orphan_guest", uuid)
    assert found.host == H1


def test_an_active_row_without_its_guest_is_missing(small_cloud):
    uuid = small_cloud.boot(H1)
    small_cloud.compute.destroy_instance(H1, uuid)
    _only(small_cloud.audit(), "missing_guest", uuid)


def test_an_active_instance_without_allocation(small_cloud):
    uuid = small_cloud.boot(H1)
    assert small_cloud.placement.release(uuid)
    _only(small_cloud.audit(), "instance_without_allocation", uuid)


def test_an_allocation_on_another_host(small_cloud):
    from fleetflow.persistence.placement.allocations import ANY_GENERATION, ConsumerWrite

    uuid = small_cloud.boot(H1)
    small_cloud.placement.write([ConsumerWrite(uuid, {small_cloud.host_uuid(H2): SMALL},
                                               "t1", "t1", ANY_GENERATION)])
    report = small_cloud.audit()
    assert sorted(m.kind for m in report.mismatches) == [
        "allocation_on_wrong_host", "instance_without_allocation"], report.summary()
    assert H2 in report.of_kind("allocation_on_wrong_host")[0].detail


def test_an_instance_holding_two_hosts_is_a_double_allocation(small_cloud):
    uuid = small_cloud.boot(H1)
    small_cloud.placement.claim(uuid, {small_cloud.host_uuid(H2): SMALL}, "t1", "t1")
    found = _only(small_cloud.audit(), "double_allocation", uuid)
    assert H1 in found.detail and H2 in found.detail


def _move_row(cloud, uuid, source, destination, status, mode=states.MODE_LIVE,
              migration_id=None, evacuation_status=states.RUNNING):
    """An evacuation holding one move of ``uuid``, as the evacuate flow writes them."""
    from fleetflow.persistence.models import Evacuation, Move

    evacuation_id = "e-" + ids.new_uuid()[:12]
    with cloud.database.session() as session:
        session.add(Evacuation(id=evacuation_id, hosts=[source], mode=mode,
                               status=evacuation_status, on_error="pause", max_parallel=8,
                               fallback="none", runs=[]))
        session.flush()
        session.add(Move(evacuation_id=evacuation_id, instance_id=uuid, index=0,
                         tenant_id="t1", source=source, destination=destination, mode=mode,
                         status=status, migration_id=migration_id or ids.new_uuid(),
                         attempts=1, hosts_tried=[destination], volumes_lost=[]))
    return evacuation_id


def test_a_migration_consumer_is_explained_only_by_its_move_in_flight(small_cloud):
    uuid = small_cloud.boot(H1)
    migration = ids.new_uuid()
    small_cloud.placement.move(uuid, migration, {small_cloud.host_uuid(H2): SMALL}, "t1", "t1")
    small_cloud.compute.build_instance(H2, uuid, SMALL)  # the destination's copy
    _set_instance(small_cloud, uuid, task_state=states.TASK_MIGRATING)
    _move_row(small_cloud, uuid, H1, H2, states.MOVING, migration_id=migration)
    # During the move the migration consumer and both copies are the move's.
    assert small_cloud.audit(strict=False).clean
    # A migration consumer no move explains is reported as such.
    with small_cloud.database.session() as session:
        from fleetflow.persistence.models import Move

        session.execute(sa.update(Move).values(status=states.DONE))
    small_cloud.compute.destroy_instance(H1, uuid)
    _set_instance(small_cloud, uuid, host=H2, task_state=None)
    _only(small_cloud.audit(), "stale_migration", migration)


def test_an_evacuated_copy_on_a_returning_host_is_reported(small_cloud):
    uuid = small_cloud.boot(H1)
    migration = ids.new_uuid()
    small_cloud.placement.move(uuid, migration, {small_cloud.host_uuid(H2): SMALL}, "t1", "t1")
    small_cloud.placement.confirm_move(migration)
    small_cloud.compute.build_instance(H2, uuid, SMALL)
    _set_instance(small_cloud, uuid, host=H2)
    _move_row(small_cloud, uuid, H1, H2, states.DONE, mode=states.MODE_REBUILD,
              evacuation_status=states.DONE)
    _only(small_cloud.audit(), "evacuated_copy", uuid)


def test_instances_on_a_down_host_are_stranded_unless_an_evacuation_holds_them(small_cloud):
    from fleetflow.persistence.models import Host

    uuid = small_cloud.boot(H1)
    small_cloud.compute.set_faults(H1, dead=True)
    with small_cloud.database.session() as session:
        session.execute(sa.update(Host).where(Host.name == H1).values(state="down"))
    # Silent because it is down: not "unreachable"; what it holds is stranded.
    _only(small_cloud.audit(), "stranded_instance", uuid)
    _move_row(small_cloud, uuid, H1, None, states.PENDING, mode=states.MODE_REBUILD)
    assert small_cloud.audit(strict=False).clean


def test_a_down_host_with_nothing_on_it_is_clean(small_cloud):
    from fleetflow.persistence.models import Host

    small_cloud.compute.set_faults(H2, dead=True)
    with small_cloud.database.session() as session:
        session.execute(sa.update(Host).where(Host.name == H2).values(state="down"))
    assert small_cloud.audit().clean


def test_a_host_whose_provider_is_gone_is_reported_until_the_fleet_is_loaded(small_cloud):
    from fleetflow.persistence import fleet
    from fleetflow.persistence.placement.models import (
        Inventory,
        ProviderTrait,
        ResourceProvider,
    )

    rp = small_cloud.host_uuid(H2)
    with small_cloud.database.session() as session:
        for table in (Inventory, ProviderTrait):
            session.execute(sa.delete(table).where(table.resource_provider_uuid == rp))
        session.execute(sa.delete(ResourceProvider).where(ResourceProvider.uuid == rp))
    found = _only(small_cloud.audit(), "missing_provider", H2)
    assert rp in found.detail and found.host == H2
    # Loading the fleet again registers the host, although its row did not change.
    with small_cloud.database.session() as session:
        fleet.load(session, fleet.expand(AUDIT_FLEET))
    assert small_cloud.audit().clean


def test_members_of_gone_or_moved_instances_are_stale(small_cloud):
    with small_cloud.database.session() as session:
        gid = groups.create(session, "t1", "g", ["anti-affinity"]).id
    gone = small_cloud.boot(H1, group_id=gid)
    moved = small_cloud.boot(H2, group_id=gid)
    small_cloud.compute.destroy_instance(H1, gone)
    small_cloud.placement.release(gone)
    _set_instance(small_cloud, gone, status=states.DELETED)
    with small_cloud.database.session() as session:
        session.execute(sa.update(GroupMember).where(GroupMember.instance_id == moved)
                        .values(host="z1-r2-h02"))
    report = small_cloud.audit()
    assert [m.kind for m in report.mismatches] == ["stale_membership"] * 2, report.summary()
    assert {m.subject for m in report.mismatches} == {f"{gid}/{gone}", f"{gid}/{moved}"}


def test_volume_mismatches(small_cloud):
    from fleetflow.flows.provision.volume import volume_id_for

    assert small_cloud.provision(1, volume_gb=10) == tf_states.SUCCESS
    with small_cloud.database.session() as session:
        volume = session.scalars(sa.select(Volume)).one()
        volume_id, instance_id = volume.id, volume.instance_id
    assert volume_id == volume_id_for(instance_id)
    assert small_cloud.placement.release(volume_id)
    _only(small_cloud.audit(), "volume_without_allocation", volume_id)
    # A volume left behind by an instance that is gone.
    with small_cloud.database.session() as session:
        session.add(Volume(id=ids.new_uuid(), tenant_id="t1", size_gb=5,
                           status=states.VOLUME_AVAILABLE, instance_id=ids.new_uuid()))
    kinds = sorted(m.kind for m in small_cloud.audit().mismatches)
    assert kinds == ["leaked_volume", "volume_without_allocation"]


def test_a_volume_detached_behind_the_rows_back(small_cloud):
    assert small_cloud.provision(1, volume_gb=10) == tf_states.SUCCESS
    with small_cloud.database.session() as session:
        volume = session.scalars(sa.select(Volume)).one()
        instance = session.get(Instance, volume.instance_id)
        volume_id, uuid, host = volume.id, instance.id, instance.host
    small_cloud.compute.detach_volume(host, uuid, volume_id)
    _only(small_cloud.audit(), "missing_attachment", volume_id)
    stray = ids.new_uuid()
    small_cloud.compute.attach_volume(host, uuid, volume_id)
    small_cloud.compute.attach_volume(host, uuid, stray)
    _only(small_cloud.audit(), "stray_attachment", stray)


def test_a_dead_host_is_unreachable_not_clean(small_cloud):
    small_cloud.boot(H1)
    small_cloud.driver.set_faults(H1, dead=True)
    found = _only(small_cloud.audit(), "unreachable_host", H1)
    assert "HostDead" in found.detail
    report = small_cloud.audit(hosts=[H2])
    assert report.clean and report.counts["hosts_asked"] == 1


def test_in_flight_instances_count_only_when_strict(small_cloud):
    uuid = small_cloud.boot(H1)
    small_cloud.compute.destroy_instance(H1, uuid)
    small_cloud.placement.release(uuid)
    _set_instance(small_cloud, uuid, status=states.BUILDING, task_state=states.TASK_SPAWNING)
    assert small_cloud.audit(strict=False).clean
    _only(small_cloud.audit(strict=True), "unsettled_instance", uuid)


def test_assert_audit_clean_fails_with_the_list(small_cloud, assert_audit_clean):
    uuid = ids.new_uuid()
    small_cloud.compute.build_instance(H2, uuid, SMALL)
    with pytest.raises(pytest.fail.Exception, match=f"orphan_guest {uuid} on {H2}"):
        assert_audit_clean(small_cloud.database, small_cloud.placement, small_cloud.compute)


# -- the API route --------------------------------------------------------------------

def test_api_route_admin_only(small_cloud, client, admin_headers, member_headers):
    r = client.get("/v2/admin/audit?strict=true", headers=admin_headers)
    assert r.status_code == 200, r.get_json()
    body = r.get_json()["audit"]
    assert body["clean"] is True and body["mismatches"] == [] and body["counts"]["hosts"] == 4
    uuid = ids.new_uuid()
    small_cloud.compute.build_instance(H1, uuid, SMALL)
    body = client.get("/v2/admin/audit", headers=admin_headers).get_json()["audit"]
    assert body["clean"] is False
    assert body["mismatches"] == [{"kind": "orphan_guest", "subject": uuid, "host": H1,
                                   "detail": "ACTIVE guest with no instance row"}]
    only = client.get(f"/v2/admin/audit?host={H2}", headers=admin_headers).get_json()
    assert only["audit"]["clean"] is True
    r = client.get("/v2/admin/audit", headers=member_headers)
    assert r.status_code == 403


def test_api_unknown_host_is_404_without_asking_any_host(small_cloud, client, admin_headers,
                                                        monkeypatch):
    from fleetflow.services.audit import sources as audit_sources

    def ask_hosts(*args, **kwargs):
        raise AssertionError("a host was asked over RPC")

    monkeypatch.setattr(audit_sources, "ask_hosts", ask_hosts)
    r = client.get(f"/v2/admin/audit?host={H1}&host=no-such-host", headers=admin_headers)
    assert r.status_code == 404, r.get_json()
    error = r.get_json()["errors"][0]
    assert error["code"] == "fleetflow.not_found"
    assert "no-such-host" in error["detail"] and H1 not in error["detail"]


# -- the CLI -------------------------------------------------------------------------

def _run_cli(conf, *args):
    from fleetflow.cli.audit import audit_cmd

    return CliRunner().invoke(audit_cmd, list(args), obj=conf, catch_exceptions=False)


def test_cli_direct_exit_codes(small_cloud):
    result = _run_cli(small_cloud.conf, "--mode", "direct", "--strict")
    assert result.exit_code == 0, result.output
    assert "0 mismatches" in result.output
    uuid = ids.new_uuid()
    small_cloud.placement.claim(uuid, {small_cloud.host_uuid(H1): SMALL}, "t1", "t1")
    result = _run_cli(small_cloud.conf, "--mode", "direct")
    assert result.exit_code == 1
    assert "leaked_allocation" in result.output and uuid in result.output
    result = _run_cli(small_cloud.conf, "--mode", "direct", "--json")
    assert result.exit_code == 1
    body = json.loads(result.stdout)
    assert [m["kind"] for m in body["mismatches"]] == ["leaked_allocation"]


def test_cli_through_the_api_and_fallback(small_cloud, live_server, make_conf):
    result = _run_cli(small_cloud.conf, "--url", live_server, "--strict")
    assert result.exit_code == 0, result.output
    assert f"audit via API {live_server}" in result.stderr
    small_cloud.compute.build_instance(H2, ids.new_uuid(), SMALL)
    result = _run_cli(small_cloud.conf, "--url", live_server)
    assert result.exit_code == 1 and "orphan_guest" in result.output
    # Nothing listens there: auto falls back to direct, api mode fails with status 2.
    dead = "http://127.0.0.1:9"
    result = _run_cli(small_cloud.conf, "--url", dead)
    assert result.exit_code == 1 and "auditing directly" in result.stderr
    result = _run_cli(small_cloud.conf, "--url", dead, "--mode", "api")
    assert result.exit_code == 2 and "no API answers" in result.stderr


def test_cli_direct_reads_the_simulated_hosts_of_another_process(small_cloud):
    """The embedded transport cannot leave a process: direct mode reads the state file."""
    from fleetflow.cli.audit import SimulatedHosts

    uuid = small_cloud.boot(H1)
    hosts = SimulatedHosts(small_cloud.conf, small_cloud.database)
    try:
        assert [g["uuid"] for g in hosts.list_instances(H1)] == [uuid]
    finally:
        hosts.close()


def test_cli_error_is_status_2(make_conf, tmp_path):
    conf = make_conf(database={"connection": f"sqlite:///{tmp_path / 'missing' / 'x.db'}"})
    result = _run_cli(conf, "--mode", "direct")
    assert result.exit_code == 2 and "audit failed" in result.stderr


def test_audit_over_a_remote_placement(small_cloud, live_server):
    """A Placement reached over HTTP is read per provider and gives the same answer."""
    from fleetflow.persistence.placement.http_client import HttpPlacement
    from fleetflow.services.audit.report import audit

    remote = HttpPlacement(live_server + "/placement", "admin")
    small_cloud.boot(H1)
    report = audit(small_cloud.database, remote, small_cloud.compute, strict=True)
    assert report.clean and report.counts["consumers"] == 1, report.summary()
    stray = ids.new_uuid()
    small_cloud.placement.claim(stray, {small_cloud.host_uuid(H2): SMALL}, "t1", "t1")
    _only(audit(small_cloud.database, remote, small_cloud.compute), "leaked_allocation", stray)
