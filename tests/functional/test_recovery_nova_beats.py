"""On OpenStack the monitor's heartbeats are Nova's: a host is suspect only once Nova
reads its compute service down, and one that beats again is a flap.

On the rows, with the monitor's own functions (services/recovery/detect.py) and a
stand-in for the OpenStack driver's two calls: the real Nova is tests/openstack's.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from fleetflow.compute.exceptions import HostDead
from fleetflow.persistence import recoveries as rows
from fleetflow.persistence.models import Host, utcnow
from fleetflow.services.recovery import detect

HOSTS = ["n1", "n2", "n3"]


class NovaServices:
    """``compute_services`` and ``ping`` as the OpenStack driver answers them."""

    def __init__(self):
        self.down: set[str] = set()
        self.last_beat = utcnow() - dt.timedelta(seconds=600)
        self.listings = 0

    def compute_services(self) -> list[dict]:
        self.listings += 1
        return [{"host": name, "state": "down" if name in self.down else "up",
                 "status": "enabled", "forced_down": False, "zone": "z1",
                 "disabled_reason": None, "updated_at": self.last_beat}
                for name in HOSTS]

    def ping(self, host, timeout=None):
        if host in self.down:
            raise HostDead(f"{host}: Nova's compute service is down", host=host)
        return {"host": host, "alive": True}


def _beats(db) -> dict:
    with db.session() as session:
        return dict(session.execute(sa.select(Host.name, Host.heartbeat_at)).all())


def _statuses(db) -> dict:
    with db.session() as session:
        return {r.host: r.status for r in session.scalars(sa.select(rows.Recovery))}


def test_a_host_is_suspect_only_once_nova_reads_it_down(add_hosts, conf):
    db = add_hosts(HOSTS)
    nova = NovaServices()
    # Every beat is older than service_down_time, yet Nova reads them all up (its own
    # service_down_time may be longer): nothing is suspect, nothing is pinged.
    detect.cloud_heartbeats(db, nova, None)
    assert set(_beats(db).values()) == {None}
    assert detect.open_suspects(db, conf, None, utcnow()) == []

    nova.down.add("n2")
    detect.cloud_heartbeats(db, nova, None)
    assert _beats(db)["n2"] == nova.last_beat and _beats(db)["n1"] is None
    assert detect.open_suspects(db, conf, None, utcnow()) == ["n2"]
    conf.set_override("confirm_seconds", 0, group="recovery")
    detect.confirm(db, conf, nova, None, utcnow())
    detect.confirm(db, conf, nova, None, utcnow())
    assert _statuses(db) == {"n2": rows.DEAD}
    assert nova.listings == 2  # one listing a pass, not one call per host


def test_a_suspect_whose_service_beats_again_is_a_flap(add_hosts, conf):
    db = add_hosts(HOSTS)
    nova = NovaServices()
    nova.down.add("n3")
    detect.cloud_heartbeats(db, nova, None)
    assert detect.open_suspects(db, conf, None, utcnow()) == ["n3"]
    nova.down.clear()
    detect.cloud_heartbeats(db, nova, None)
    assert _beats(db)["n3"] is None
    detect.confirm(db, conf, nova, None, utcnow())
    assert _statuses(db) == {"n3": rows.FLAPPED}
