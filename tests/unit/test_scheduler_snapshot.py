"""snapshot_from_db: Host rows plus caller-given usage become one consistent view."""

from fleetflow.persistence.models import Host
from fleetflow.scheduler import RequestSpec, schedule, snapshot_from_db


def add_host(session, name, **extra):
    session.add(Host(uuid=f"uuid-{name}", name=name, region="na", zone="east", rack="r1",
                     inventory={"VCPU": {"total": 8, "allocation_ratio": 2.0, "reserved": 2},
                                "MEMORY_MB": {"total": 4096}},
                     capabilities={"gpu": "true"}, traits=["AVX2"], **extra))


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
