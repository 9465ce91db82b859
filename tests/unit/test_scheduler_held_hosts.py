"""A host an evacuation holds takes no new server, even while it still reads ``up``.

A live or cold evacuation leaves its hosts ``up``; the hold (``hosts.evacuation_id``)
is what says they must end empty. The snapshot carries it and every pass (new
reservations, virtual clusters, another evacuation's moves) leaves such hosts out.
"""

from fleetflow.persistence import fleet
from fleetflow.persistence.models import Host
from fleetflow.scheduler import CloudSnapshot, HostState, RequestSpec, schedule, snapshot_from_db
from fleetflow.scheduler.moves.place import ServerToMove, place_moves


def add_host(session, name, **extra):
    """A host row and, as the fleet loader makes it, its placement provider."""
    session.add(Host(uuid=f"uuid-{name}", name=name, region="na", zone="east", rack="r1",
                     inventory={"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}},
                     **extra))
    session.flush()
    fleet.register_providers(session, hosts={name}, backends=set())


def test_the_snapshot_reads_the_hold_and_schedules_leave_the_held_host_out(db):
    with db.session() as session:
        add_host(session, "h1", evacuation_id="e-000000000001")
        add_host(session, "h2")
    with db.session() as session:
        snapshot = snapshot_from_db(session)

    held, free = snapshot.hosts
    assert (held.state, held.held_by, held.takes_new_servers) == (
        "up", "e-000000000001", False)
    assert (free.held_by, free.takes_new_servers) == (None, True)
    placement = schedule(RequestSpec(count=4, resources={"VCPU": 1}), snapshot)
    assert {p.host for p in placement.instances} == {"h2"}
    assert [(s.name, s.before, s.after) for s in placement.filters][0] == ("state", 2, 1)


def test_an_evacuation_moves_nothing_onto_a_host_another_one_holds():
    def host(name, **extra):
        return HostState(name, uuid=f"u-{name}", region="na", zone="z0", rack="r0",
                         capacity={"VCPU": 8}, **extra)

    snapshot = CloudSnapshot([host("src"), host("a"), host("b", held_by="e-000000000002")])
    result = place_moves([ServerToMove(f"s{i}", "src", {"VCPU": 1}) for i in range(4)],
                         snapshot, alternates=2)

    assert not result.unplaced
    assert {h for hosts in result.candidates.values() for h in hosts} == {"a"}
