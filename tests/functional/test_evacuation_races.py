"""An evacuation and builds aimed at the same host, racing in the embedded cloud.

Everything is real and concurrent: the API of ``fleetflow serve``, its
conductor threads running the provision flows, the simulated fleet with slow
boots. Each round a tenant reserves instances that spread over every host
while, from another thread, an operator drains one of them a little later.
Whatever the order, a drain that reads DONE leaves its host empty: either it
was refused (409, servers building there) or the builds went elsewhere.
Rounds start the drain at growing delays so both orders happen.

Below that, the two transactions that decide it race alone, many times, on
SQLite and PostgreSQL: a build's claim recording its host and an
evacuation's hold of that host. Exactly one of them goes through; this fails
if the claim reads the host without its lock on PostgreSQL, or if the
evacuation counts the builds before it holds the host.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa
import yaml

from fleetflow.common import states
from fleetflow.persistence.models import Instance
from tests.functional.embedded import serving, small_fleet, until

HOST = "z1-r1-h01"
MEMBER = {"X-Project-Id": "demo", "X-Roles": "member"}
ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
# Seconds after the reservation's POST at which each round's drain is sent:
# from before its schedule to the middle of its boots.
DELAYS = (0.0, 0.05, 0.15, 0.3, 0.5, 0.8)
RESERVATION_SETTLED = {"ACTIVE", "PARTIAL", "ERROR", "REVERTED", "DELETED", "PAUSED"}


@pytest.fixture(params=["sqlite", "postgresql"])
def cloud(request, make_conf, tmp_path):
    database = {}
    if request.param == "postgresql":
        database = {"connection": request.getfixturevalue("pg_url")}
    conf = make_conf(api={"port": 0}, conductor={"workers": 2},
                     fleet={"file": small_fleet(tmp_path, 3)},
                     compute={"boot_seconds": 1.0},
                     jobboard={"claim_expiry": 10, "keepalive_interval": 1.0}, **(
                         {"database": database} if database else {}))
    with serving(conf) as cloud:
        yield cloud


def _reserve(cloud) -> str:
    answer = requests.post(f"{cloud.url}/v2/demo/reservations", headers=MEMBER, timeout=10,
                           json={"reservation": {"count": 3, "flavor_ref": "m1.small",
                                                 "image_ref": "cirros"}})
    assert answer.status_code == 202, answer.text
    return answer.json()["reservation"]["id"]


def _reservation(cloud, rid) -> dict:
    return requests.get(f"{cloud.url}/v2/demo/reservations/{rid}", headers=MEMBER,
                        timeout=10).json()["reservation"]


def _drain(cloud, delay: float) -> requests.Response:
    time.sleep(delay)
    return requests.post(f"{cloud.url}/v2/admin/hosts/{HOST}/evacuate", headers=ADMIN,
                         timeout=10, json={"evacuate": {"mode": "drain"}})


def _evacuation(cloud, evacuation_id) -> dict:
    return requests.get(f"{cloud.url}/v2/admin/evacuations/{evacuation_id}", headers=ADMIN,
                        timeout=10).json()["evacuation"]


def _left_on(cloud, host: str) -> list[tuple[str, str]]:
    with cloud.database.session() as session:
        return [(i.id, i.status) for i in session.scalars(sa.select(Instance).where(
            Instance.host == host, Instance.status != states.DELETED))]


def _round(cloud, delay: float) -> None:
    """One race, then the reservation deleted and the host up again for the next."""
    with ThreadPoolExecutor(2) as pool:
        reserving = pool.submit(_reserve, cloud)
        draining = pool.submit(_drain, cloud, delay)
        rid, drain = reserving.result(), draining.result()
    reservation = until(lambda: _reservation(cloud, rid),
                         lambda r: r["status"] in RESERVATION_SETTLED)
    assert reservation["status"] == "ACTIVE", reservation
    if drain.status_code == 409:
        assert drain.json()["errors"][0]["code"] == "BUILDS_IN_PROGRESS", drain.text
    else:
        assert drain.status_code == 202, drain.text
        evacuation = until(lambda: _evacuation(cloud, drain.json()["evacuation"]["id"]),
                            lambda e: e["status"] in states.EVACUATION_SETTLED)
        assert evacuation["status"] == states.DONE, evacuation
        # The drained host is in maintenance and must have ended empty.
        assert _left_on(cloud, HOST) == [], f"drain DONE at delay {delay}, host not empty"
        answer = requests.put(f"{cloud.url}/v2/admin/hosts/{HOST}", headers=ADMIN,
                              timeout=10, json={"host": {"state": "up"}})
        assert answer.status_code == 200, answer.text
    gone = requests.delete(f"{cloud.url}/v2/demo/reservations/{rid}", headers=MEMBER,
                           timeout=10)
    assert gone.status_code == 202, gone.text
    until(lambda: _reservation(cloud, rid), lambda r: r["status"] == "DELETED")


@pytest.mark.slow
def test_a_drain_and_builds_aimed_at_its_host_never_both_go_through(cloud,
                                                                  assert_audit_clean):
    from fleetflow.flows import runtime

    for delay in DELAYS:
        _round(cloud, delay)

    assert_audit_clean(cloud.database, runtime.get().placement, cloud.compute,
                       service_down_time=cloud.conf.compute.service_down_time)


# -- the two transactions alone, racing ------------------------------------------------

RACES = 40


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, make_conf, tmp_path):
    from fleetflow.persistence import fleet
    from fleetflow.persistence.db import Database

    url = (request.getfixturevalue("pg_url") if request.param == "postgresql"
           else f"sqlite:///{tmp_path / 'race.db'}")
    database = Database(url)
    database.upgrade()
    with database.session() as session:
        document = yaml.safe_load(Path(small_fleet(tmp_path, 3)).read_text())
        fleet.load(session, fleet.expand(document))
    yield make_conf(database={"connection": url}), database
    database.dispose()


def _claim(database, uuid: str) -> bool:
    """What a build's claim does once its allocation is written; False: claim lost."""
    from fleetflow.flows.tasks.claim import ClaimRace, refuse_closed_hosts
    from fleetflow.persistence import reservations

    try:
        with database.session() as session:
            refuse_closed_hosts(session, [HOST])
            reservations.record_attempt(session, uuid, HOST, status=states.BUILDING,
                                        task_state=states.TASK_SPAWNING)
    except ClaimRace:
        return False
    return True


def _hold(ops) -> bool:
    """An operator's evacuation of HOST; False: refused for the build there."""
    from fleetflow.persistence.evacuations import BuildsInProgress
    from fleetflow.services.evacuations import EvacuationRequest

    try:
        ops.evacuate(EvacuationRequest(hosts=[HOST], mode=states.MODE_LIVE))
    except BuildsInProgress:
        return False
    return True


def _reset(database, uuid: str) -> None:
    from fleetflow.persistence.models import Evacuation, Host, Move

    with database.session() as session:
        session.execute(sa.delete(Move))
        session.execute(sa.delete(Evacuation))
        session.execute(sa.update(Host).values(evacuation_id=None, state=states.HOST_UP))
        session.execute(sa.update(Instance).where(Instance.id == uuid).values(
            host=None, hosts_tried=[], attempts=0, status=states.BUILDING))


def test_a_hold_and_a_claim_of_one_host_at_once_exactly_one_wins(database):
    """Each round a build's claim and an evacuation's hold of its host start together,
    in two threads: never both through (a drain DONE over a build), never both refused."""
    from fleetflow.common import ids
    from fleetflow.services.evacuations import EvacuationOps

    conf, database = database
    uuid = ids.new_uuid()
    with database.session() as session:
        session.add(Instance(id=uuid, tenant_id="t1", name="vm", status=states.BUILDING,
                             flavor_id="1", image_id="8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01"))
    ops = EvacuationOps(conf, database, submit=lambda *args, **kwargs: kwargs.get("flow_id"))
    start = threading.Barrier(2)

    def together(fn, *args):
        start.wait(timeout=30)
        return fn(*args)

    for _ in range(RACES):
        _reset(database, uuid)
        with ThreadPoolExecutor(2) as pool:
            claimed = pool.submit(together, _claim, database, uuid)
            held = pool.submit(together, _hold, ops)
            outcome = (claimed.result(), held.result())
        assert outcome in ((True, False), (False, True)), outcome
