"""The cloud's view into fleetflow's rows: Nova- and Placement-shaped data in, rows out."""

import copy
import datetime as dt

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from fleetflow.cli.main import cli
from fleetflow.common import states
from fleetflow.compute.openstack import inventory
from fleetflow.persistence import cloud_sync, fleet, models
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence.placement import allocations as allocs
from fleetflow.persistence.placement.models import Allocation, ProviderTrait, ResourceProvider

RP = {"host001": "0b7d6a0e-0d6e-4a3a-9c8e-000000000001",
      "host002": "0b7d6a0e-0d6e-4a3a-9c8e-000000000002",
      "host003": "0b7d6a0e-0d6e-4a3a-9c8e-000000000003"}


def _service(host, state="up", status="enabled", forced_down=False, reason=None, zone="az1"):
    return {"id": f"uuid-{host}", "binary": "nova-compute", "host": host, "zone": zone,
            "state": state, "status": status, "forced_down": forced_down,
            "disabled_reason": reason, "updated_at": "2026-11-28T20:00:00.000000"}


def _inventory(vcpus=16, ram=32768, disk=400):
    return {"resource_provider_generation": 3, "inventories": {
        "VCPU": {"total": vcpus, "reserved": 0, "min_unit": 1, "max_unit": vcpus,
                 "step_size": 1, "allocation_ratio": 4.0},
        "MEMORY_MB": {"total": ram, "reserved": 512, "min_unit": 1, "max_unit": ram,
                      "step_size": 1, "allocation_ratio": 1.5},
        "DISK_GB": {"total": disk, "reserved": 0, "min_unit": 1, "max_unit": disk,
                    "step_size": 1, "allocation_ratio": 1.0}}}


def nova_view(services=None, usages=None) -> inventory.CloudView:
    """A CloudView built by the normalizers from bodies as Nova and Placement send them."""
    services = services if services is not None else [
        _service("host001"), _service("host002", status="disabled", reason="broken fan"),
        _service("host003", forced_down=True, zone="az2")]
    hosts = [s["host"] for s in services]
    view = inventory.CloudView(region="RegionOne")
    view.services = inventory.services_from_nova({"services": [
        *services, {"binary": "nova-conductor", "host": "ctl", "state": "up",
                    "status": "enabled", "forced_down": False, "zone": "internal"}]})
    view.providers = inventory.providers_from_nova([
        {"id": RP[h], "hypervisor_hostname": f"{h}.example", "state": "up",
         "status": "enabled", "service": {"host": h, "id": f"uuid-{h}",
                                          "disabled_reason": None}} for h in hosts])
    view.aggregates = inventory.aggregates_from_nova({"aggregates": [
        {"id": 1, "name": "az1", "availability_zone": "az1", "hosts": ["host001", "host002"],
         "metadata": {"availability_zone": "az1", "fleetflow_rack": "r07"}},
        {"id": 2, "name": "fast", "availability_zone": None, "hosts": ["host001"],
         "metadata": {"ssd": "true"}}]})
    for h in hosts:
        rp = RP[h]
        view.inventories[rp] = inventory.inventories_from_placement(_inventory())
        view.traits[rp] = sorted({"COMPUTE_NET_ATTACH_INTERFACE", "HW_CPU_X86_AVX2"}
                                 | ({"COMPUTE_STATUS_DISABLED"} if h == "host002" else set()))
        view.usages[rp] = dict((usages or {}).get(h, {}))
    view.flavors = inventory.flavors_from_nova([
        {"id": "1", "name": "m1.tiny", "vcpus": 1, "ram": 512, "disk": 1, "swap": "",
         "OS-FLV-EXT-DATA:ephemeral": 0, "extra_specs": {}},
        {"id": "2", "name": "m1.small", "vcpus": 1, "ram": 2048, "disk": 20, "swap": 0,
         "OS-FLV-EXT-DATA:ephemeral": 0, "extra_specs": {}},
        {"id": "42", "name": "m1.swap", "vcpus": 2, "ram": 1024, "disk": 10, "swap": 1536,
         "OS-FLV-EXT-DATA:ephemeral": 5, "extra_specs": {"hw:cpu_policy": "shared"}}])
    view.images = inventory.images_from_nova([
        {"id": "155d900f-4e14-4e4c-a73d-069cbf4541e6", "name": "fakeimage123456",
         "minDisk": 0, "minRam": 0, "status": "ACTIVE"},
        {"id": "a2459075-d96c-40d5-893e-577ff92e721c", "name": "fakeimage123456",
         "minDisk": 1, "minRam": 128, "status": "ACTIVE"}])
    view.server_groups = inventory.server_groups_from_nova([
        {"id": "g1", "name": "web", "policy": "anti-affinity", "rules": {},
         "members": ["s1"]},
        {"id": "g2", "name": "old", "policies": ["affinity"], "members": []}])
    return view


def _apply(db, view):
    with db.session() as session:
        return cloud_sync.apply(session, view, view.region)


def _hosts(db) -> dict[str, models.Host]:
    with db.session() as session:
        rows = session.scalars(sa.select(models.Host)).all()
        session.expunge_all()
        return {h.name: h for h in rows}


def _provider_traits(db, uuid) -> set:
    with db.session() as session:
        return set(session.scalars(sa.select(ProviderTrait.trait).where(
            ProviderTrait.resource_provider_uuid == uuid)))


def _allocations(db) -> dict:
    with db.session() as session:
        found: dict = {}
        for a in session.scalars(sa.select(Allocation)):
            found.setdefault(a.consumer_uuid, {}).setdefault(
                a.resource_provider_uuid, {})[a.resource_class] = a.used
        return found


def _everything(db) -> dict:
    """Every row sync writes, generations and timestamps included."""
    with db.session() as session:
        return {model.__tablename__: sorted(tuple(str(v) for v in row) for row in
                                            session.execute(sa.select(model.__table__)).all())
                for model in (models.Host, models.Flavor, models.Image, ResourceProvider,
                              ProviderTrait, Allocation)}


def test_normalizers_read_the_documented_bodies():
    view = nova_view()
    assert [s["host"] for s in view.services] == ["host001", "host002", "host003"]
    assert view.providers == RP
    assert view.flavors[0]["swap"] == 0 and view.flavors[2]["ephemeral"] == 5
    assert [g["policy"] for g in view.server_groups] == ["anti-affinity", "affinity"]
    assert view.images[1] == {"id": "a2459075-d96c-40d5-893e-577ff92e721c",
                              "name": "fakeimage123456", "min_disk": 1, "min_ram": 128}
    assert inventory.images_from_glance([{"id": "x", "name": "cirros", "min_disk": 1,
                                          "min_ram": None}]) == [
        {"id": "x", "name": "cirros", "min_disk": 1, "min_ram": 0}]


def test_hosts_take_the_clouds_topology_inventory_traits_and_state(db):
    counts = _apply(db, nova_view())
    assert counts == {"hosts": 3, "up": 1, "down": 1, "disabled": 1, "maintenance": 0,
                      "added": 3, "vanished": 0, "skipped": 0, "flavors": 3, "images": 2,
                      "external": 0}
    hosts = _hosts(db)
    one, two, three = hosts["host001"], hosts["host002"], hosts["host003"]
    assert one.uuid == fleet.stable_uuid("host001")
    assert (one.region, one.zone, one.rack) == ("RegionOne", "az1", "r07")
    assert one.capabilities == {"region": "RegionOne", "zone": "az1", "rack": "r07",
                                "fleetflow_rack": "r07", "ssd": "true"}
    assert (three.zone, three.rack) == ("az2", "default")
    assert one.inventory["MEMORY_MB"] == {"total": 32768, "reserved": 512,
                                          "allocation_ratio": 1.5}
    assert one.traits == two.traits == ["COMPUTE_NET_ATTACH_INTERFACE", "HW_CPU_X86_AVX2"]
    assert [(h.state, h.state_reason) for h in (one, two, three)] == [
        ("up", None), ("disabled", "broken fan"), ("down", "nova-compute is forced down")]
    # The ledger's provider is fleetflow's host uuid; not-up hosts carry the disabled trait.
    assert "COMPUTE_STATUS_DISABLED" not in _provider_traits(db, one.uuid)
    assert {"COMPUTE_STATUS_DISABLED", "CUSTOM_COMPUTE_HOST", "HW_CPU_X86_AVX2"} \
        <= _provider_traits(db, two.uuid)
    assert "COMPUTE_STATUS_DISABLED" in _provider_traits(db, three.uuid)


def test_catalogs_take_the_clouds_flavors_and_images(db):
    _apply(db, nova_view())
    with db.session() as session:
        flavors = {f.id: f for f in session.scalars(sa.select(models.Flavor))}
        images = {i.id: i.name for i in session.scalars(sa.select(models.Image))}
        # root 10 + ephemeral 5 + 1536 MB of swap (2 GB): what Nova claims.
        assert flavors["42"].resources == {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 17}
        assert flavors["42"].extra_specs == {"hw:cpu_policy": "shared"}
    assert images == {"155d900f-4e14-4e4c-a73d-069cbf4541e6": "fakeimage123456",
                      "a2459075-d96c-40d5-893e-577ff92e721c":
                      "fakeimage123456 (a2459075-d96c-40d5-893e-577ff92e721c)"}


def test_a_stale_flavor_gives_its_name_to_the_clouds(db):
    with db.session() as session:
        fleet.load(session, fleet.expand(fleet.read()))  # m1.small is id "2" there too
        session.execute(sa.update(models.Flavor).where(models.Flavor.id == "10")
                        .values(name="m1.swap"))
    _apply(db, nova_view())
    with db.session() as session:
        names = dict(session.execute(sa.select(models.Flavor.id, models.Flavor.name)).all())
    assert (names["42"], names["10"], names["2"]) == ("m1.swap", "m1.swap~10", "m1.small")


def test_syncing_twice_writes_nothing_the_second_time(db):
    usages = {"host001": {"VCPU": 3, "MEMORY_MB": 4096, "DISK_GB": 20}}
    first = _apply(db, nova_view(usages=usages))
    before = _everything(db)
    second = _apply(db, nova_view(usages=usages))
    assert _everything(db) == before
    assert second == dict(first, added=0)


def test_a_host_the_cloud_stops_reporting_goes_down_and_keeps_its_row(db):
    _apply(db, nova_view(usages={"host001": {"VCPU": 2}}))
    counts = _apply(db, nova_view(services=[_service("host002")]))
    assert (counts["hosts"], counts["vanished"], counts["up"]) == (1, 2, 1)
    hosts = _hosts(db)
    assert set(hosts) == {"host001", "host002", "host003"}
    assert (hosts["host001"].state, hosts["host001"].state_reason) == (
        "down", cloud_sync.VANISHED_REASON)
    assert hosts["host002"].state == "up"
    assert "COMPUTE_STATUS_DISABLED" in _provider_traits(db, hosts["host001"].uuid)
    assert "COMPUTE_STATUS_DISABLED" not in _provider_traits(db, hosts["host002"].uuid)
    # Nothing is held any more for what others used on a host the cloud forgot.
    assert cloud_sync.external_consumer("host001") not in _allocations(db)


def test_an_evacuations_state_and_an_operators_maintenance_are_kept(db):
    _apply(db, nova_view())
    with db.session() as session:
        session.execute(sa.update(models.Host).where(models.Host.name == "host001")
                        .values(state=states.HOST_DOWN, state_reason="evacuating",
                                evacuation_id="e1"))
        session.execute(sa.update(models.Host).where(models.Host.name == "host002")
                        .values(state=states.HOST_MAINTENANCE, state_reason="disks"))
    _apply(db, nova_view())
    hosts = _hosts(db)
    assert (hosts["host001"].state, hosts["host001"].state_reason) == ("down", "evacuating")
    assert (hosts["host002"].state, hosts["host002"].state_reason) == ("maintenance", "disks")
    # Once Nova enables the service again, the cloud's word wins over maintenance.
    _apply(db, nova_view(services=[_service("host001"), _service("host002"),
                                   _service("host003")]))
    assert _hosts(db)["host002"].state == "up"


def test_a_silent_service_reads_down_by_its_last_beat_and_never_lifts_a_fence(db):
    _apply(db, nova_view())
    assert _hosts(db)["host001"].heartbeat_at is None  # Nova reads it up
    silent = [_service("host001", state="down"), _service("host002"), _service("host003")]
    _apply(db, nova_view(services=silent))
    host = _hosts(db)["host001"]
    last_beat = dt.datetime(2026, 11, 28, 20, 0, 0)
    assert (host.state, host.heartbeat_at) == ("up", last_beat)
    assert evac_rows.effective_host_state(host, 60, last_beat + dt.timedelta(seconds=61)) \
        == "down"
    assert evac_rows.effective_host_state(host, 60, last_beat + dt.timedelta(seconds=30)) \
        == "up"
    # Fenced by the recovery before Nova hears of it: the silent service keeps it
    # fenced, and Nova's forced down afterwards keeps who fenced it.
    with db.session() as session:
        session.execute(sa.update(models.Host).where(models.Host.name == "host001")
                        .values(state=states.HOST_DOWN, state_reason="automatic"))
    _apply(db, nova_view(services=silent))
    assert (_hosts(db)["host001"].state, _hosts(db)["host001"].state_reason) == (
        "down", "automatic")
    forced = [_service("host001", state="down", forced_down=True, status="disabled"),
              *silent[1:]]
    _apply(db, nova_view(services=forced))
    assert (_hosts(db)["host001"].state, _hosts(db)["host001"].state_reason) == (
        "down", "automatic")
    # A service that beats again and is enabled lifts it; its beat is Nova's again.
    _apply(db, nova_view(services=[_service("host001"), *silent[1:]]))
    host = _hosts(db)["host001"]
    assert (host.state, host.heartbeat_at) == ("up", None)


def test_a_services_beat_is_read_in_utc():
    services = inventory.services_from_nova({"services": [
        {**_service("a"), "updated_at": "2026-11-28T21:00:00+01:00"},
        {**_service("b"), "updated_at": None},
        {**_service("c"), "updated_at": "yesterday"}]})
    assert [s["updated_at"] for s in services] == [dt.datetime(2026, 11, 28, 20), None, None]


def _own_instance(db, host: str, status=states.ACTIVE, flavor_id="2", index=0) -> str:
    """A fleetflow instance on ``host`` holding its m1.small claim in the ledger."""
    instance_id = fleet.stable_uuid(f"instance-{host}-{index}")
    with db.session() as session:
        session.add(models.Instance(id=instance_id, tenant_id="t", name="vm", host=host,
                                    status=status, flavor_id=flavor_id, image_id="i",
                                    index=index))
        allocs.replace_allocations(session, [allocs.ConsumerWrite(
            instance_id, {fleet.stable_uuid(host): {"VCPU": 1, "MEMORY_MB": 2048,
                                                    "DISK_GB": 20}}, "t", "t")])
    return instance_id


def test_others_usage_is_held_by_one_external_consumer_per_host(db):
    _apply(db, nova_view())
    _own_instance(db, "host001")
    _own_instance(db, "host001", status=states.DELETED, index=1)  # holds nothing in the cloud
    _own_instance(db, "host002")
    usages = {"host001": {"VCPU": 3, "MEMORY_MB": 4096, "DISK_GB": 20},
              "host002": {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 20}}
    counts = _apply(db, nova_view(usages=usages))
    held = _allocations(db)
    one = fleet.stable_uuid("host001")
    # host001: the cloud uses 3 VCPU / 4096 MB / 20 GB, fleetflow's own 1 / 2048 / 20.
    assert held[cloud_sync.external_consumer("host001")] == {one: {"VCPU": 2,
                                                                   "MEMORY_MB": 2048}}
    # host002: the cloud uses less than fleetflow's own instance: nothing is held.
    assert cloud_sync.external_consumer("host002") not in held
    assert counts["external"] == 1
    with db.session() as session:
        consumer_type = session.execute(sa.text(
            "SELECT consumer_type FROM consumers WHERE uuid = :u"),
            {"u": cloud_sync.external_consumer("host001")}).scalar()
    assert consumer_type == cloud_sync.EXTERNAL_TYPE
    # The next sync replaces what is held; others' usage gone, nothing is held.
    usages["host001"] = {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
    assert _apply(db, nova_view(usages=usages))["external"] == 0
    assert cloud_sync.external_consumer("host001") not in _allocations(db)


def test_external_usage_never_holds_more_than_the_ledger_has_room_for(db):
    _apply(db, nova_view())
    _own_instance(db, "host001")
    _apply(db, nova_view(usages={"host001": {"VCPU": 500, "MEMORY_MB": 10}}))
    held = _allocations(db)[cloud_sync.external_consumer("host001")]
    # 16 VCPU at ratio 4.0 is 64; fleetflow's own instance holds 1 of them.
    assert held == {fleet.stable_uuid("host001"): {"VCPU": 63}}


def test_a_service_without_inventory_is_skipped_until_placement_has_it(db):
    view = nova_view()
    view.inventories[RP["host003"]] = {}
    counts = _apply(db, view)
    assert (counts["hosts"], counts["skipped"]) == (2, 1)
    assert set(_hosts(db)) == {"host001", "host002"}
    later = copy.deepcopy(view)
    later.inventories[RP["host003"]] = inventory.inventories_from_placement(_inventory())
    assert _apply(db, later)["added"] == 1


def test_cli_refuses_to_sync_a_simulated_cloud(conf, monkeypatch):
    monkeypatch.setenv("FLEETFLOW_DATABASE_CONNECTION", conf.database.connection)
    monkeypatch.setenv("FLEETFLOW_CLOUD_DRIVER", "simulated")
    result = CliRunner().invoke(cli, ["fleet", "sync"])
    assert result.exit_code == 2
    assert "not openstack" in result.output


@pytest.mark.parametrize("service, expected", [
    (_service("h"), ("up", None)),
    # Silent is not a state: the heartbeat says it (test_a_silent_service_...).
    (_service("h", state="down"), ("up", None)),
    (_service("h", status="disabled"), ("disabled", "nova-compute is disabled")),
    (_service("h", state="down", status="disabled"), ("disabled", "nova-compute is disabled")),
    (_service("h", forced_down=True), ("down", "nova-compute is forced down")),
])
def test_service_states_map_to_host_states(service, expected):
    assert cloud_sync.service_state(inventory.services_from_nova(
        {"services": [service]})[0]) == expected


def test_a_class_the_cloud_drops_goes_once_only_others_held_it(db):
    _apply(db, nova_view())
    _own_instance(db, "host001")
    _apply(db, nova_view(usages={"host002": {"DISK_GB": 30}}))
    dropped = nova_view()
    for host in ("host001", "host002"):
        del dropped.inventories[RP[host]]["DISK_GB"]
    counts = _apply(db, dropped)
    assert counts["hosts"] == 3
    hosts = _hosts(db)
    # fleetflow's own instance still holds DISK_GB on host001: the class stays there.
    assert "DISK_GB" in hosts["host001"].inventory
    assert "DISK_GB" not in hosts["host002"].inventory
    assert cloud_sync.external_consumer("host002") not in _allocations(db)
