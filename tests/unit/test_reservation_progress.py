"""A reservation's progress as its GET shows it: shared by polls while it builds,
exact once it is settled (services/reservations.py)."""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence.models import Instance, Reservation
from fleetflow.services import reservations


def _active(cloud, rid: str, count: int) -> None:
    with cloud.database.session() as session:
        uuids = session.scalars(sa.select(Instance.id).where(
            Instance.reservation_id == rid).order_by(Instance.index).limit(count)).all()
        session.execute(sa.update(Instance).where(Instance.id.in_(uuids))
                        .values(status=states.ACTIVE))


def _progress(cloud, rid: str) -> dict:
    return reservations.show(cloud.database, "t1", rid, instance_limit=0)[1]


def test_polls_of_a_building_reservation_share_one_count_per_tenth_of_a_second(
        fleetflow_cloud, monkeypatch):
    cloud = fleetflow_cloud
    now = [1000.0]
    monkeypatch.setattr(reservations.time, "monotonic", lambda: now[0])
    rid, _job = cloud.reserve(4)
    with cloud.database.session() as session:
        session.execute(sa.update(Reservation).where(Reservation.id == rid)
                        .values(status=states.BUILDING))
    assert _progress(cloud, rid)["active"] == 0
    _active(cloud, rid, 2)
    now[0] += reservations.PROGRESS_MAX_AGE / 2
    assert _progress(cloud, rid)["active"] == 0  # the count of a moment ago
    now[0] += reservations.PROGRESS_MAX_AGE
    assert _progress(cloud, rid)["active"] == 2
    # Settled: exact at once, however recent the last count.
    _active(cloud, rid, 4)
    with cloud.database.session() as session:
        session.execute(sa.update(Reservation).where(Reservation.id == rid)
                        .values(status=states.ACTIVE))
    assert _progress(cloud, rid) == {**_progress(cloud, rid), "active": 4, "building": 0}


def test_the_list_counts_a_deleted_reservations_progress_once(fleetflow_cloud, monkeypatch):
    from fleetflow.persistence import reservations as rows

    cloud = fleetflow_cloud
    gone, job = cloud.reserve(3)
    assert cloud.run(job) == "SUCCESS"
    reservations.ReservationOps(cloud.conf, cloud.database, submit=cloud.submit
                                ).delete_reservation("t1", gone)
    assert cloud.run(cloud.posted[-1]) == "SUCCESS"
    building, _job = cloud.reserve(2)
    asked, count = [], rows.progress_by_reservation
    monkeypatch.setattr(rows, "progress_by_reservation",
                        lambda session, ids: asked.append(sorted(ids)) or count(session, ids))

    def listed() -> dict:
        return {r.id: (r.status, p) for r, p in
                reservations.list_page(cloud.database, "t1", limit=10)[0]}
    first, second = listed(), listed()
    assert first == second
    assert first[gone] == (states.DELETED, {"total": 3, "active": 0, "building": 0,
                                            "error": 0, "reverted": 0, "deleted": 3})
    assert first[building][1]["building"] == 2
    # Counted once, then only the reservation whose instances can still change.
    assert asked == [sorted([gone, building]), [building]]


def test_final_progress_keeps_copies_and_forgets_everything_past_its_limit():
    from fleetflow.services.final_progress import FinalProgress

    final = FinalProgress(limit=2)
    counted = {"total": 3, "deleted": 3}
    final.remember({"a": counted})
    counted["total"] = 99  # the caller's dict is not the one kept
    shown = final.known(["a", "b"])
    assert shown == {"a": {"total": 3, "deleted": 3}}
    shown["a"]["total"] = 0  # nor is the one handed out
    assert final.known(["a"]) == {"a": {"total": 3, "deleted": 3}}
    final.remember({"b": {"total": 1}})
    assert set(final.known(["a", "b"])) == {"a", "b"}
    # One more than the limit: everything is forgotten and counted again later.
    final.remember({"c": {"total": 2}})
    assert final.known(["a", "b", "c"]) == {"c": {"total": 2}}
