"""snapshot_from_db: Host rows plus caller-given usage become one consistent view."""

import sqlalchemy as sa

from fleetflow.persistence import fleet
from fleetflow.persistence.models import Host
from fleetflow.persistence.placement.models import Inventory, ProviderTrait, ResourceProvider
from fleetflow.scheduler import RequestSpec, schedule, snapshot_from_db


def add_host(session, name, **extra):
    """A host row and, as the fleet loader makes it, its placement provider."""
    session.add(Host(uuid=f"uuid-{name}", name=name, region="na", zone="east", rack="r1",
                     inventory={"VCPU": {"total": 8, "allocation_ratio": 2.0, "reserved": 2},
                                "MEMORY_MB": {"total": 4096}},
                     capabilities={"gpu": "true"}, traits=["AVX2"], **extra))
    session.flush()
    fleet.register_providers(session, hosts={name}, backends=set())


def test_rows_usage_and_failures_are_read(db):
    with db.session() as session:
        add_host(session, "h2")
        add_host(session, "h1", state="down")
    with db.session() as session:
        snapshot = snapshot_from_db(session, usage={"uuid-h2": {"VCPU": 3}},
                                    failures={"h2": 2})
    assert [h.name for h in snapshot.hosts] == ["h1", "h2"]
    h1, h2 = snapshot.hosts
    assert h1.state == "down"
    assert h2.capacity == {"VCPU": 12, "MEMORY_MB": 4096}
    assert h2.used == {"VCPU": 3} and h1.used == {}
    assert h2.recent_failures == 2 and h1.recent_failures == 0
    assert h2.traits == frozenset({"AVX2"})
    assert h2.capabilities["gpu"] == "true" and h2.capabilities["region"] == "na"
    assert h2.domain("rack") == ("na", "east", "r1")


def test_a_db_snapshot_schedules_and_is_not_changed_by_it(db):
    with db.session() as session:
        add_host(session, "h1")
        add_host(session, "h2")
    with db.session() as session:
        snapshot = snapshot_from_db(session)
    placement = schedule(RequestSpec(count=3, resources={"VCPU": 4}), snapshot)
    assert sorted(p.host for p in placement.instances) == ["h1", "h1", "h2"]
    assert placement.host_uuids == {"h1": "uuid-h1", "h2": "uuid-h2"}
    assert all(h.used == {} for h in snapshot.hosts)
    snapshot.add_usage("h1", {"VCPU": 4}, count=3)
    assert snapshot.by_name["h1"].used == {"VCPU": 12}


def test_a_host_whose_provider_is_gone_is_left_out(db):
    with db.session() as session:
        add_host(session, "h1")
        add_host(session, "h2")
    with db.session() as session:
        # Removed behind placement's back: a claim on h1 could only fail.
        for table in (Inventory, ProviderTrait):
            session.execute(sa.delete(table).where(table.resource_provider_uuid == "uuid-h1"))
        session.execute(sa.delete(ResourceProvider).where(ResourceProvider.uuid == "uuid-h1"))
    with db.session() as session:
        snapshot = snapshot_from_db(session)
    assert [h.name for h in snapshot.hosts] == ["h2"]
    placement = schedule(RequestSpec(count=2, resources={"VCPU": 4}), snapshot)
    assert [p.host for p in placement.instances] == ["h2", "h2"]


def test_the_snapshot_read_as_one_row_of_json_is_the_row_by_row_one(db, monkeypatch):
    from fleetflow.persistence import bulk

    awkward = 'q"uote \\ ünï ☃ {"not": "json"}'
    with db.session() as session:
        add_host(session, "h2", evacuation_id="evac-1")
        add_host(session, "h1", state="maintenance")
        session.execute(sa.update(Host).where(Host.name == "h1").values(
            capabilities={"note": awkward, "cores": 64, "ratio": 1.5, "none": None},
            traits=[], inventory={"VCPU": 16}))
    with db.session() as session:
        as_json = snapshot_from_db(session, usage={"uuid-h1": {"VCPU": 1}}, failures={"h2": 1})
    monkeypatch.setattr(bulk, "_as_json", lambda _columns: False)
    with db.session() as session:
        by_rows = snapshot_from_db(session, usage={"uuid-h1": {"VCPU": 1}}, failures={"h2": 1})
    assert as_json.hosts == by_rows.hosts
    assert as_json.by_name["h1"].capabilities["note"] == awkward
    assert as_json.by_name["h2"].held_by == "evac-1"
