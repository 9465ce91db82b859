"""Group and reservation rows: the rules the API and the flows rely on."""

import datetime as dt

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.common.exceptions import Conflict, InvalidInput, NotFound
from fleetflow.persistence import fleet, groups, reservations
from fleetflow.persistence.models import Flavor, Instance, Reservation


@pytest.fixture
def loaded(db):
    with db.session() as s:
        fleet.load(s, fleet.expand(fleet.read()))
    return db


def test_group_policy_changes_only_while_empty(db):
    with db.session() as s:
        g = groups.create(s, "t1", "web", ["anti-affinity"], metadata={"tier": "web"})
        gid = g.id
    with db.session() as s:
        g = groups.get(s, gid, "t1")
        groups.update(s, g, name="web2", metadata={"a": "b"}, policies=["affinity"])
    with db.session() as s:
        groups.join(s, gid, "11111111-1111-1111-1111-111111111111", "h1")
    with db.session() as s:
        g = groups.get(s, gid, "t1")
        assert (g.name, g.policies, g.metadata_) == ("web2", ["affinity"], {"a": "b"})
        groups.update(s, g, name="still-fine")
        with pytest.raises(Conflict):
            groups.update(s, g, policies=["anti-affinity"])
        with pytest.raises(Conflict):
            groups.delete(s, g)
    with db.session() as s:
        assert groups.leave(s, "11111111-1111-1111-1111-111111111111") == 1
        groups.delete(s, groups.get(s, gid))
    with db.session() as s, pytest.raises(NotFound):
        groups.get(s, gid)


def test_group_is_invisible_to_other_tenants(db):
    with db.session() as s:
        gid = groups.create(s, "t1", None, []).id
    with db.session() as s, pytest.raises(NotFound):
        groups.get(s, gid, "t2")


@pytest.mark.parametrize("policies, match", [
    (["affinity", "anti-affinity"], "contradict"),
    (["nearby"], "unknown policy"),
    (["host-capabilities"], "needs capability"),
])
def test_bad_policies_are_refused(db, policies, match):
    with db.session() as s, pytest.raises(InvalidInput, match=match):
        groups.create(s, "t1", None, policies)


def test_join_is_idempotent_and_moves(db):
    with db.session() as s:
        gid = groups.create(s, "t1", None, ["anti-affinity"]).id
        iid = "22222222-2222-2222-2222-222222222222"
        groups.join(s, gid, iid, "h1")
        groups.join(s, gid, iid, "h1")
        groups.join(s, gid, iid, "h2")
        assert groups.member_hosts(s, gid) == {iid: "h2"}
        assert groups.leave(s, iid, host="h1") == 0
        assert groups.leave(s, iid, host="h2") == 1


def test_reservation_rows_progress_and_quota(loaded, conf):
    with loaded.session() as s:
        flavor = s.get(Flavor, "2")
        r = reservations.create(s, tenant_id="t1", user_id="u", name="batch",
                                policy=states.ALL_OR_NOTHING, request={"count": 3},
                                count=3, flavor_id=flavor.id, image_id="img",
                                group_id=None, idempotency_key="k1")
        rid = r.id
    assert rid.startswith("r-")
    with loaded.session() as s:
        rows = reservations.instances(s, rid)
        assert [i.name for i in rows] == ["batch-0000", "batch-0001", "batch-0002"]
        assert len({i.id for i in rows}) == 3 and rid not in {i.id for i in rows}
        reservations.update_instance(s, rows[0].id, status=states.ACTIVE)
        reservations.update_instance(s, rows[1].id, status=states.ERROR)
        assert reservations.progress(s, rid) == {
            "total": 3, "active": 1, "building": 1, "error": 1, "reverted": 0, "deleted": 0}
        assert reservations.find_by_idempotency_key(s, "t1", "k1").id == rid
        assert reservations.usage(s, "t1") == {"instances": 3, "vcpus": 3, "ram_mb": 6144}
        reservations.set_quota(s, "t1", {"instances": 4, "vcpus": 100, "ram_mb": 10**6})
        reservations.check_quota(s, "t1", flavor, 1, conf.quota)
        with pytest.raises(reservations.QuotaExceeded, match="instances"):
            reservations.check_quota(s, "t1", flavor, 2, conf.quota)
        reservations.check_quota(s, "t2", flavor, 1000, conf.quota)


def test_progress_of_many_reservations_is_each_ones_progress(loaded):
    with loaded.session() as s:
        made = [reservations.create(s, tenant_id="t1", user_id="u", name=f"r{n}",
                                    policy=states.ALL_OR_NOTHING, request={"count": n},
                                    count=n, flavor_id="2", image_id="img",
                                    group_id=None, idempotency_key=f"k{n}").id
                for n in (1, 2, 4)]
        first, second, third = (reservations.instances(s, rid) for rid in made)
        reservations.update_instance(s, first[0].id, status=states.ACTIVE)
        reservations.update_instance(s, second[0].id, status=states.DELETED)
        reservations.update_instance(s, second[1].id, status=states.REVERTED)
        reservations.update_instance(s, third[0].id, status=states.ERROR)
        reservations.update_instance(s, third[1].id, status=states.REVERTING)
        many = reservations.progress_by_reservation(s, [*made, "r-none"])
        assert many == {**{rid: reservations.progress(s, rid) for rid in made},
                        "r-none": {"total": 0, "active": 0, "building": 0, "error": 0,
                                   "reverted": 0, "deleted": 0}}
        assert many[made[2]]["building"] == 3
        # Each instance counts by what happened to it: deleted is not reverted.
        assert (many[made[1]]["reverted"], many[made[1]]["deleted"]) == (1, 1)


def test_record_attempt_keeps_hosts_in_order(loaded):
    with loaded.session() as s:
        rid = reservations.create(s, tenant_id="t1", user_id=None, name=None,
                                  policy=states.BEST_EFFORT, request={}, count=1,
                                  flavor_id="1", image_id="img", group_id=None).id
        iid = reservations.instance_ids(s, rid)[0]
        for host in ("a", "a", "b"):
            reservations.record_attempt(s, iid, host)
        row = reservations.instances(s, rid)[0]
        assert (row.attempts, row.hosts_tried, row.host) == (2, ["a", "b"], "b")


def _new_reservation(s, count: int) -> tuple[str, list[str]]:
    rid = reservations.create(s, tenant_id="t1", user_id=None, name="w",
                              policy=states.BEST_EFFORT, request={}, count=count,
                              flavor_id="1", image_id="img", group_id=None).id
    return rid, reservations.instance_ids(s, rid)


LONG_AGO = dt.datetime(2000, 1, 1)


def test_record_attempt_writes_its_values_and_counts_only_new_hosts(loaded):
    with loaded.session() as s:
        rid, (iid, other) = _new_reservation(s, 2)
        s.execute(sa.update(Instance).values(updated_at=LONG_AGO))
    with loaded.session() as s:
        reservations.record_attempt(s, iid, "a", status=states.BUILDING,
                                    task_state=states.TASK_SPAWNING)
        reservations.record_attempt(s, iid, "a", task_state=states.TASK_CLAIMING)
        reservations.record_attempt(s, "no-such-instance", "a", status=states.ERROR)
    with loaded.session() as s:
        row, untouched = reservations.instances(s, rid)
        assert (row.status, row.task_state, row.host, row.attempts, row.hosts_tried) == (
            states.BUILDING, states.TASK_CLAIMING, "a", 1, ["a"])
        assert row.updated_at > LONG_AGO
        assert (untouched.status, untouched.host, untouched.attempts,
                untouched.hosts_tried, untouched.updated_at) == (
            states.PENDING, None, 0, [], LONG_AGO)


def test_first_attempts_of_many_instances_in_one_write(loaded):
    with loaded.session() as s:
        rid, (a, b, untouched) = _new_reservation(s, 3)
    for _ in range(2):  # a task run twice after a crash writes the same
        with loaded.session() as s:
            reservations.record_first_attempts(s, {a: "h1", b: "h2"}, status=states.BUILDING,
                                               task_state=states.TASK_SPAWNING)
    with loaded.session() as s:
        rows = {r.id: r for r in reservations.instances(s, rid)}
        assert [(rows[i].host, rows[i].attempts, rows[i].hosts_tried, rows[i].status,
                 rows[i].task_state) for i in (a, b)] == [
            ("h1", 1, ["h1"], states.BUILDING, states.TASK_SPAWNING),
            ("h2", 1, ["h2"], states.BUILDING, states.TASK_SPAWNING)]
        assert (rows[untouched].host, rows[untouched].attempts) == (None, 0)
        # A later try elsewhere appends to what the batch wrote.
        reservations.record_attempt(s, a, "h3")
    with loaded.session() as s:
        row = next(r for r in reservations.instances(s, rid) if r.id == a)
        assert (row.attempts, row.hosts_tried) == (2, ["h1", "h3"])


def test_instance_and_reservation_status_writes(loaded):
    with loaded.session() as s:
        rid, ids = _new_reservation(s, 3)
        s.execute(sa.update(Instance).values(updated_at=LONG_AGO))
        s.execute(sa.update(Reservation).values(updated_at=LONG_AGO))
    failed = reservations.fault("BUILD_FAILED", "disk full", "boot", "h1")
    with loaded.session() as s:
        reservations.update_instances(s, ids[:2], status=states.BUILDING,
                                      task_state=states.TASK_CLAIMING)
        reservations.update_instance(s, ids[1], status=states.ERROR, fault=failed)
        reservations.set_status(s, rid, states.PARTIAL, fault=failed)
    with loaded.session() as s:
        first, second, third = reservations.instances(s, rid)
        assert (first.status, first.task_state, first.fault) == (
            states.BUILDING, states.TASK_CLAIMING, None)
        assert (second.status, second.task_state, second.fault) == (
            states.ERROR, states.TASK_CLAIMING, failed)
        assert first.updated_at > LONG_AGO and second.updated_at > LONG_AGO
        assert (third.status, third.updated_at) == (states.PENDING, LONG_AGO)
        reservation = reservations.get(s, rid)
        assert (reservation.status, reservation.fault) == (states.PARTIAL, failed)
        assert reservation.updated_at > LONG_AGO
    with loaded.session() as s:
        reservations.set_status(s, rid, states.BUILDING)
    with loaded.session() as s:
        assert reservations.get(s, rid).fault == failed
        reservations.set_status(s, rid, states.ACTIVE, clear_fault=True)
    with loaded.session() as s:
        reservation = reservations.get(s, rid)
        assert (reservation.status, reservation.fault) == (states.ACTIVE, None)


def test_the_revert_marker_finds_a_fault_past_cleared_ones(loaded):
    from fleetflow.flows.provision.lifecycle import _first_fault

    with loaded.session() as s:
        rid, (failed, cleared, never) = _new_reservation(s, 3)
        reservations.update_instance(s, failed, fault=reservations.fault("BUILD_FAILED", "x"))
        s.execute(sa.update(Instance).values(updated_at=LONG_AGO))
    with loaded.session() as s:
        # Written later: a fault set back to None (JSON null in the column).
        reservations.update_instance(s, cleared, fault=None)
    with loaded.session() as s:
        assert _first_fault(s, rid)["code"] == "BUILD_FAILED"
        reservations.update_instance(s, failed, fault=None)
    with loaded.session() as s:
        assert _first_fault(s, rid) is None
