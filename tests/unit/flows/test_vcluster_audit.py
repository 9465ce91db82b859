"""The audit over volumes and vclusters: a real cluster built by its flow, then broken.

Each test builds a vcluster with the real flow on the small cloud, checks the
strict audit is clean, breaks one thing the way a bug or an operator would
(placement, the backend behind the rows' back, a row, a grouping) and checks
the audit names exactly what broke.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common import ids, states
from fleetflow.persistence.models import (
    GroupMember,
    Host,
    Instance,
    StorageBackend,
    VCluster,
    VClusterGrouping,
    Volume,
)
from fleetflow.persistence.placement.allocations import ANY_GENERATION, ConsumerWrite
from fleetflow.services.audit.report import KINDS, audit
from fleetflow.tests.unit.flows.test_vcluster_flow import (
    TWO_SERVERS_APART,
    create,
    grouping,
    members,
    ops,
    run_last,
    server,
    show,
    volume,
)

SERVER_WITH_VOLUME = {"instances": [server("db-server-1"), volume("db-vol-1")],
            "groupings": [grouping("group-1", ["db-server-1", "db-vol-1"], "affinity")]}
PAIR = {"instances": [server("a"), server("b")],
        "groupings": [grouping("apart", ["a", "b"], "anti-affinity")]}
SMALL = {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
IMAGE_ID = "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01"


def run_audit(cloud, strict: bool = True, **kwargs):
    return audit(cloud.database, cloud.runtime.placement, cloud.runtime.compute,
                 strict=strict, **kwargs)


def kinds(report) -> list[str]:
    return sorted(m.kind for m in report.mismatches)


def only(report, kind: str, subject: str | None = None):
    """The report holds exactly one mismatch, of ``kind`` (about ``subject``)."""
    assert kinds(report) == [kind], report.summary()
    found = report.mismatches[0]
    if subject is not None:
        assert found.subject == subject, report.summary()
    return found


def built(cloud, body: dict) -> tuple[str, dict[str, dict]]:
    """A cluster built by its flow, audited clean; its members by name."""
    vcluster_id = create(cloud, body)
    assert run_last(cloud) == "SUCCESS"
    report = run_audit(cloud)
    assert report.clean, report.summary()
    return vcluster_id, members(show(cloud, vcluster_id))


def provider(cloud, name: str) -> str:
    """The placement provider of a host or a storage backend."""
    with cloud.database.session() as session:
        found = session.scalar(sa.select(StorageBackend.uuid).where(
            StorageBackend.name == name))
        return found or session.scalar(sa.select(Host.uuid).where(Host.name == name))


def place(cloud, uuid: str, host: str) -> None:
    """Move a server completely (row, allocation, guest, memberships) to ``host``."""
    with cloud.database.session() as session:
        old = session.get(Instance, uuid).host
        session.execute(sa.update(Instance).where(Instance.id == uuid).values(host=host))
        session.execute(sa.update(GroupMember).where(GroupMember.instance_id == uuid)
                        .values(host=host))
    cloud.runtime.placement.write([ConsumerWrite(uuid, {provider(cloud, host): SMALL}, "t1",
                                                 "t1", ANY_GENERATION)])
    cloud.runtime.compute.build_instance(host, uuid, SMALL)
    cloud.runtime.compute.destroy_instance(old, uuid)


def other_rack_host(cloud, host: str) -> str:
    rack = host.split("-")[1]
    with cloud.database.session() as session:
        return session.scalars(sa.select(Host.name).where(Host.rack != rack)
                               .order_by(Host.name)).first()


# -- clean ---------------------------------------------------------------------------

def test_a_built_cluster_audits_clean_with_its_volumes_and_groupings(evac_cloud):
    vcluster_id, found = built(evac_cloud, TWO_SERVERS_APART)
    report = run_audit(evac_cloud)
    assert report.counts["vclusters"] == 1 and report.counts["groupings"] == 4
    assert report.counts["volumes"] == 2 and report.counts["backend_volumes"] == 2
    # Every backend a living host reaches was listed: 8 local disks and 2 racks.
    assert report.counts["backends"] == report.counts["backends_asked"] == 10
    assert report.counts["backends_unreachable"] == 0
    assert run_audit(evac_cloud, strict=False).clean
    # Removing a member and deleting the cluster leave nothing behind either.
    ops(evac_cloud).remove("t1", vcluster_id, "db-vol-2")
    assert run_last(evac_cloud) == "SUCCESS"
    assert run_audit(evac_cloud).clean, run_audit(evac_cloud).summary()
    ops(evac_cloud).delete("t1", vcluster_id)
    assert run_last(evac_cloud) == "SUCCESS"
    report = run_audit(evac_cloud)
    assert report.clean and report.counts["backend_volumes"] == 0, report.summary()


def test_new_kinds_are_in_the_legend():
    for kind in ("orphan_volume_allocation", "volume_wrong_size", "unknown_backend",
                 "stale_volume", "missing_volume", "volume_unreachable", "unreachable_backend",
                 "grouping_violated", "unsettled_vcluster"):
        assert kind in KINDS


# -- placement -----------------------------------------------------------------------

def test_a_volume_whose_allocation_was_released(evac_cloud):
    _vc, found = built(evac_cloud, TWO_SERVERS_APART)
    vol = found["db-vol-1"]
    assert evac_cloud.runtime.placement.release(vol["id"])
    found_ = only(run_audit(evac_cloud), "volume_without_allocation", vol["id"])
    assert vol["backend"] in found_.detail and "IN-USE" in found_.detail


def test_a_volume_holding_the_wrong_size_or_on_another_backend(evac_cloud):
    _vc, found = built(evac_cloud, SERVER_WITH_VOLUME)
    vol = found["db-vol-1"]
    own = provider(evac_cloud, vol["backend"])
    placement = evac_cloud.runtime.placement
    placement.write([ConsumerWrite(vol["id"], {own: {"DISK_GB": 3}}, "t1", "t1",
                                   ANY_GENERATION)])
    assert only(run_audit(evac_cloud), "volume_wrong_size", vol["id"]).detail == (
        f"holds {vol['backend']}: DISK_GB=3; its size is 10 GB")
    # Its size held twice: on its backend and on another one.
    other = "z1-r2-shared" if vol["backend"] != "z1-r2-shared" else "z1-r1-shared"
    placement.write([ConsumerWrite(vol["id"], {own: {"DISK_GB": 10},
                                               provider(evac_cloud, other): {"DISK_GB": 10}},
                                   "t1", "t1", ANY_GENERATION)])
    assert other in only(run_audit(evac_cloud), "volume_on_wrong_backend", vol["id"]).detail


def test_a_stray_allocation_on_a_backend_is_an_orphan_volume(evac_cloud):
    built(evac_cloud, SERVER_WITH_VOLUME)
    stray = ids.new_uuid()
    evac_cloud.runtime.placement.claim(stray, {provider(evac_cloud, "z1-r2-shared"):
                                               {"DISK_GB": 5}}, "t1", "t1")
    found = only(run_audit(evac_cloud), "orphan_volume_allocation", stray)
    assert "z1-r2-shared" in found.detail and "DISK_GB=5" in found.detail
    assert only(run_audit(evac_cloud, strict=False), "orphan_volume_allocation", stray)


def test_a_deleted_volume_or_an_instance_holding_backend_space_is_an_orphan(evac_cloud):
    vcluster_id, found = built(evac_cloud, SERVER_WITH_VOLUME)
    vol = found["db-vol-1"]
    ops(evac_cloud).delete("t1", vcluster_id)
    assert run_last(evac_cloud) == "SUCCESS"
    backend = provider(evac_cloud, vol["backend"])
    evac_cloud.runtime.placement.claim(vol["id"], {backend: {"DISK_GB": 10}}, "t1", "t1")
    assert "volume is DELETED" in only(run_audit(evac_cloud), "orphan_volume_allocation",
                                       vol["id"]).detail
    evac_cloud.runtime.placement.release(vol["id"])
    # An instance holds its disk on its host, never on a storage backend.
    uuid = ids.new_uuid()
    host = "z1-r1-h01"
    with evac_cloud.database.session() as session:
        session.add(Instance(id=uuid, tenant_id="t1", name="vm", host=host,
                             status=states.ACTIVE, flavor_id="1", image_id=IMAGE_ID))
    evac_cloud.runtime.placement.claim(uuid, {provider(evac_cloud, host): SMALL,
                                              provider(evac_cloud, "z1-r1-shared"):
                                              {"DISK_GB": 20}}, "t1", "t1")
    evac_cloud.runtime.compute.build_instance(host, uuid, SMALL)
    only(run_audit(evac_cloud), "orphan_volume_allocation", uuid)


# -- the backends --------------------------------------------------------------------

def test_a_volume_deleted_on_its_backend_behind_the_rows_back(evac_cloud):
    _vc, found = built(evac_cloud, SERVER_WITH_VOLUME)
    vol = found["db-vol-1"]
    evac_cloud.driver.force_detach_volume(vol["backend"], vol["id"])
    evac_cloud.driver.delete_volume(vol["backend"], vol["id"])
    found_ = only(run_audit(evac_cloud), "missing_volume", vol["id"])
    assert found_.detail == f"IN-USE on backend {vol['backend']}, which does not have it"


def test_volumes_on_a_backend_that_the_rows_do_not_explain_are_stale(evac_cloud):
    vcluster_id, found = built(evac_cloud, SERVER_WITH_VOLUME)
    unknown = ids.new_uuid()
    evac_cloud.driver.create_volume("z1-r2-shared", unknown, 5)
    found_ = only(run_audit(evac_cloud), "stale_volume", unknown)
    assert "with no volume row" in found_.detail
    evac_cloud.driver.delete_volume("z1-r2-shared", unknown)
    vol = found["db-vol-1"]
    ops(evac_cloud).delete("t1", vcluster_id)
    assert run_last(evac_cloud) == "SUCCESS"
    assert run_audit(evac_cloud).clean
    # The backend has the deleted volume again.
    evac_cloud.driver.create_volume(vol["backend"], vol["id"], 10)
    assert "the row is DELETED" in only(run_audit(evac_cloud), "stale_volume",
                                        vol["id"]).detail


def test_a_row_naming_a_backend_not_in_the_fleet(evac_cloud):
    _vc, found = built(evac_cloud, SERVER_WITH_VOLUME)
    vol = found["db-vol-1"]
    with evac_cloud.database.session() as session:
        session.execute(sa.update(Volume).where(Volume.id == vol["id"])
                        .values(backend="nowhere"))
    report = run_audit(evac_cloud)
    # The real backend still has it, and the grouping cannot see where it is.
    assert kinds(report) == ["grouping_violated", "stale_volume", "unknown_backend"], \
        report.summary()
    assert report.of_kind("unknown_backend")[0].subject == vol["id"]
    assert "row says backend nowhere" in report.of_kind("stale_volume")[0].detail


def test_a_backend_no_answering_host_reaches_is_unreachable(evac_cloud):
    host = "z1-r2-h04"
    evac_cloud.runtime.compute.set_faults(host, dead=True)
    report = run_audit(evac_cloud)
    assert kinds(report) == ["unreachable_backend", "unreachable_host"], report.summary()
    found = report.of_kind("unreachable_backend")[0]
    assert found.subject == f"{host}-local" and found.host == host
    assert report.counts["backends_unreachable"] == 1
    # Down, it is expected to be silent, and so is the disk only it reaches.
    with evac_cloud.database.session() as session:
        session.execute(sa.update(Host).where(Host.name == host).values(state="down"))
    report = run_audit(evac_cloud)
    assert report.clean, report.summary()
    assert report.counts["backends_asked"] == 9
    # Asking some hosts lists only the backends they reach.
    report = run_audit(evac_cloud, hosts=["z1-r1-h01"])
    assert report.clean and report.counts["backends_asked"] == 2


# -- reach and groupings -------------------------------------------------------------

def test_an_attached_volume_out_of_reach_of_its_servers_host(evac_cloud):
    vcluster_id, found = built(evac_cloud, SERVER_WITH_VOLUME)
    srv, vol = found["db-server-1"], found["db-vol-1"]
    elsewhere = other_rack_host(evac_cloud, srv["host"])
    with evac_cloud.database.session() as session:
        session.execute(sa.update(Instance).where(Instance.id == srv["id"])
                        .values(host=elsewhere))
    report = run_audit(evac_cloud)
    unreachable = report.of_kind("volume_unreachable")
    assert [m.subject for m in unreachable] == [vol["id"]], report.summary()
    assert unreachable[0].host == elsewhere and vol["backend"] in unreachable[0].detail
    # The server-volume affinity fails too, and the row no longer matches the rest.
    assert kinds(report) == ["allocation_on_wrong_host", "grouping_violated",
                             "instance_without_allocation", "missing_guest", "orphan_guest",
                             "volume_unreachable"], report.summary()
    assert report.of_kind("grouping_violated")[0].subject == f"{vcluster_id}/group-1"


def test_two_anti_affine_servers_on_one_host_violate_their_grouping(evac_cloud):
    vcluster_id, found = built(evac_cloud, PAIR)
    place(evac_cloud, found["b"]["id"], found["a"]["host"])
    found_ = only(run_audit(evac_cloud), "grouping_violated", f"{vcluster_id}/apart")
    host = found["a"]["host"]
    assert found_.detail == (f"vcluster {vcluster_id}: anti-affinity grouping apart "
                             f"(scope default) does not hold: a in {host}, b in {host}")


def test_an_edited_grouping_that_does_not_hold(evac_cloud):
    vcluster_id, found = built(evac_cloud, TWO_SERVERS_APART)
    with evac_cloud.database.session() as session:
        session.execute(sa.update(VClusterGrouping).where(
            VClusterGrouping.vcluster_id == vcluster_id, VClusterGrouping.name == "group-3")
            .values(rule="affinity"))
    found_ = only(run_audit(evac_cloud), "grouping_violated", f"{vcluster_id}/group-3")
    assert found["db-server-1"]["host"] in found_.detail
    assert found["db-server-2"]["host"] in found_.detail
    # A grouping of a cluster that is not ACTIVE is not judged.
    with evac_cloud.database.session() as session:
        session.execute(sa.update(VCluster).where(VCluster.id == vcluster_id)
                        .values(status=states.ERROR))
    assert run_audit(evac_cloud).clean


def test_a_vcluster_group_member_on_the_wrong_host_is_stale(evac_cloud):
    vcluster_id, found = built(evac_cloud, TWO_SERVERS_APART)
    srv = found["db-server-2"]
    with evac_cloud.database.session() as session:
        member = session.execute(sa.select(GroupMember).where(
            GroupMember.instance_id == srv["id"])).scalar_one()
        member.host, group_id = "z1-r2-h04", member.group_id
    found_ = only(run_audit(evac_cloud), "stale_membership", f"{group_id}/{srv['id']}")
    assert srv["host"] in found_.detail


# -- flows in flight -----------------------------------------------------------------

def test_a_cluster_running_a_flow_is_left_alone_unless_strict(evac_cloud):
    vcluster_id, found = built(evac_cloud, SERVER_WITH_VOLUME)
    vol = found["db-vol-1"]
    with evac_cloud.database.session() as session:
        session.execute(sa.update(VCluster).where(VCluster.id == vcluster_id)
                        .values(status=states.UPDATING))
    evac_cloud.driver.force_detach_volume(vol["backend"], vol["id"])
    evac_cloud.driver.delete_volume(vol["backend"], vol["id"])
    assert run_audit(evac_cloud, strict=False).clean
    report = run_audit(evac_cloud)
    assert kinds(report) == ["missing_volume", "unsettled_vcluster"], report.summary()


def test_a_volume_being_created_holds_space_before_its_backend_has_it(evac_cloud):
    vcluster_id, found = built(evac_cloud, SERVER_WITH_VOLUME)
    vol = found["db-vol-1"]
    evac_cloud.driver.force_detach_volume(vol["backend"], vol["id"])
    evac_cloud.driver.delete_volume(vol["backend"], vol["id"])
    with evac_cloud.database.session() as session:
        session.execute(sa.update(Volume).where(Volume.id == vol["id"])
                        .values(status=states.VOLUME_CREATING, instance_id=None))
    evac_cloud.runtime.compute.detach_volume(found["db-server-1"]["host"],
                                             found["db-server-1"]["id"], vol["id"])
    assert run_audit(evac_cloud, strict=False).clean
    found_ = only(run_audit(evac_cloud), "unsettled_volume", vol["id"])
    assert found_.detail == "status CREATING"
