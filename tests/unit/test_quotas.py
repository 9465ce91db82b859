"""Quota rows and checks: limits with their defaults, usage, and the checks a request passes."""

from __future__ import annotations

import pytest

from fleetflow.common import ids, states
from fleetflow.persistence import fleet, reservations
from fleetflow.persistence.models import Flavor, Quota, Volume


@pytest.fixture
def loaded(db):
    with db.session() as s:
        fleet.load(s, fleet.expand(fleet.read()))
    return db


def add_volumes(session, tenant_id, *sizes, status=states.VOLUME_AVAILABLE):
    for size in sizes:
        session.add(Volume(id=ids.new_uuid(), tenant_id=tenant_id, size_gb=size,
                           status=status))
    session.flush()


def boot(session, tenant_id, flavor_id, count):
    reservations.create(session, tenant_id=tenant_id, user_id=None, name=None,
                        policy=states.BEST_EFFORT, request={}, count=count,
                        flavor_id=flavor_id, image_id="img", group_id=None)


def test_limits_have_five_keys_and_null_volume_limits_are_the_defaults(db, conf):
    conf.set_override("volumes", 3, group="quota")
    with db.session() as s:
        assert reservations.quota_for(s, "t1", conf.quota) == {
            "instances": conf.quota.instances, "vcpus": conf.quota.vcpus,
            "ram_mb": conf.quota.ram_mb, "volumes": 3, "gigabytes": 100000}
        answer = reservations.set_quota(s, "t1", {"instances": 1, "vcpus": 2, "ram_mb": 3},
                                        conf.quota)
        assert answer == {"instances": 1, "vcpus": 2, "ram_mb": 3, "volumes": 3,
                          "gigabytes": 100000}
        assert (s.get(Quota, "t1").volumes, s.get(Quota, "t1").gigabytes) == (None, None)
        reservations.set_quota(s, "t1", {"volumes": 9, "gigabytes": -1})
        assert reservations.quota_for(s, "t1", conf.quota) == {
            "instances": 1, "vcpus": 2, "ram_mb": 3, "volumes": 9, "gigabytes": -1}


def test_volume_usage_leaves_out_deleted_volumes(db):
    with db.session() as s:
        add_volumes(s, "t1", 10, 20)
        add_volumes(s, "t1", 40, status=states.VOLUME_IN_USE)
        add_volumes(s, "t1", 80, status=states.VOLUME_ERROR)
        add_volumes(s, "t1", 1000, status=states.VOLUME_DELETED)
        add_volumes(s, "t2", 5)
        assert reservations.volume_usage(s, "t1") == {"volumes": 4, "gigabytes": 150}
        assert reservations.volume_usage(s, "t3") == {"volumes": 0, "gigabytes": 0}


def test_check_volume_quota_checks_count_and_gigabytes(db, conf):
    with db.session() as s:
        add_volumes(s, "t1", 10, 20)
        reservations.set_quota(s, "t1", {"instances": 1, "vcpus": 1, "ram_mb": 1,
                                         "volumes": 4, "gigabytes": 100})
        reservations.check_volume_quota(s, "t1", 2, 70, conf.quota)
        with pytest.raises(reservations.QuotaExceeded,
                           match=r"^quota exceeded for volumes: 2 used \+ 3 asked > 4$"):
            reservations.check_volume_quota(s, "t1", 3, 3, conf.quota)
        with pytest.raises(reservations.QuotaExceeded,
                           match=r"^quota exceeded for gigabytes: 30 used \+ 71 asked > 100$"
                           ) as raised:
            reservations.check_volume_quota(s, "t1", 1, 71, conf.quota)
        assert raised.value.status == 403
        assert raised.value.code == "fleetflow.quota_exceeded"
        # Deleted volumes give their share back.
        add_volumes(s, "t1", 500, status=states.VOLUME_DELETED)
        reservations.check_volume_quota(s, "t1", 2, 70, conf.quota)


def test_check_volume_quota_unlimited_and_defaults(db, conf):
    conf.set_override("volumes", 1, group="quota")
    conf.set_override("gigabytes", 10, group="quota")
    with db.session() as s:
        reservations.check_volume_quota(s, "t1", 1, 10, conf.quota)
        with pytest.raises(reservations.QuotaExceeded, match="volumes"):
            reservations.check_volume_quota(s, "t1", 2, 10, conf.quota)
        with pytest.raises(reservations.QuotaExceeded, match="gigabytes"):
            reservations.check_volume_quota(s, "t1", 1, 11, conf.quota)
        reservations.set_quota(s, "t1", {"instances": 1, "vcpus": 1, "ram_mb": 1,
                                         "volumes": -1, "gigabytes": -1})
        reservations.check_volume_quota(s, "t1", 10**6, 10**9, conf.quota)


def test_check_instance_quota_takes_totals_of_several_flavors(loaded, conf):
    with loaded.session() as s:
        small, large = s.get(Flavor, "2"), s.get(Flavor, "4")
        boot(s, "t1", small.id, 2)
        used = {"instances": 2, "vcpus": 2 * small.vcpus, "ram_mb": 2 * small.ram_mb}
        assert reservations.usage(s, "t1") == used
        # Two small and one large more, asked at once.
        asked = {"instances": 3, "vcpus": 2 * small.vcpus + large.vcpus,
                 "ram_mb": 2 * small.ram_mb + large.ram_mb}
        exact = {key: used[key] + asked[key] for key in asked}
        reservations.set_quota(s, "t1", exact)
        reservations.check_instance_quota(s, "t1", asked, conf.quota)
        for key in asked:
            reservations.set_quota(s, "t1", {**exact, key: exact[key] - 1})
            with pytest.raises(reservations.QuotaExceeded,
                               match=f"^quota exceeded for {key}: {used[key]} used "
                                     rf"\+ {asked[key]} asked > {exact[key] - 1}$"):
                reservations.check_instance_quota(s, "t1", asked, conf.quota)
        # Keys not asked count as nothing; volumes are not instance resources.
        reservations.set_quota(s, "t1", {**exact, "volumes": 0, "gigabytes": 0})
        reservations.check_instance_quota(s, "t1", {"instances": 1}, conf.quota)


def test_check_quota_is_check_instance_quota_of_one_flavor(loaded, conf):
    with loaded.session() as s:
        flavor = s.get(Flavor, "2")
        reservations.set_quota(s, "t1", {"instances": -1, "vcpus": 3 * flavor.vcpus,
                                         "ram_mb": -1})
        reservations.check_quota(s, "t1", flavor, 3, conf.quota)
        with pytest.raises(reservations.QuotaExceeded, match="vcpus"):
            reservations.check_quota(s, "t1", flavor, 4, conf.quota)
        # Volumes do not count against instance limits.
        add_volumes(s, "t1", 10**6)
        reservations.set_quota(s, "t1", {"volumes": 0, "gigabytes": 0})
        reservations.check_quota(s, "t1", flavor, 3, conf.quota)
