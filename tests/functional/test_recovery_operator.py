"""The monitor never races an operator: a host an operator set down, holds in an
evacuation, or evacuated by hand between an automatic fence and its evacuation (a
monitor that died there, the next one taking over) is not the monitor's to act on.

On the rows, with the monitor's own functions (services/recovery/): no cloud runs.
"""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.persistence import evacuations as evacuation_rows
from fleetflow.persistence import recoveries as rows
from fleetflow.persistence.models import Host, utcnow
from fleetflow.services.recovery import act, detect

HOSTS = ["z1-k1-h01", "z1-k1-h02", "z1-k1-h03", "z1-k1-h04", "z1-k1-h05", "z1-k1-h06"]


class RecordingEvacuations:
    """The operators' path as the monitor calls it; records each request."""

    def __init__(self):
        self.requests = []

    def evacuate(self, request):
        self.requests.append(request)
        return {"id": request.evacuation_id}

    def dry_run(self, request, as_up=()):
        return {"fits": True, "instances": []}


@pytest.fixture
def fleet(add_hosts, conf):
    db = add_hosts(HOSTS)
    fresh = utcnow()
    with db.session() as session:
        for host in session.query(Host):
            host.heartbeat_at = fresh
    return db


def _host(session, name) -> Host:
    return session.scalars(sa.select(Host).where(Host.name == name)).one()


def _silence(db, name, seconds=120):
    with db.session() as session:
        _host(session, name).heartbeat_at = utcnow() - dt.timedelta(seconds=seconds)


def _fenced(db, name) -> tuple[str, str]:
    """A recovery of ``name`` as a monitor left it when it died after the fence."""
    with db.session() as session:
        _host(session, name).state = states.HOST_DOWN
        _host(session, name).state_reason = act.FENCE_REASON
        row = rows.Recovery(id=rows.new_id(), host=name, zone="z1", status=rows.FENCED,
                            open_host=name, suspect_at=utcnow() - dt.timedelta(seconds=5),
                            fenced_at=utcnow(), timeline=[],
                            evacuation_id=evacuation_rows.new_evacuation_id())
        session.add(row)
        return row.id, row.evacuation_id


def _recovery(db, recovery_id):
    with db.read_session() as session:
        return rows.view(rows.get(session, recovery_id))


def test_hosts_an_operator_set_down_or_holds_are_never_suspect(fleet, conf):
    _silence(fleet, HOSTS[0])
    _silence(fleet, HOSTS[1])
    _silence(fleet, HOSTS[2])
    with fleet.session() as session:
        _host(session, HOSTS[0]).state = states.HOST_DOWN  # an operator's fence
        _host(session, HOSTS[1]).evacuation_id = "ev-operator00"  # an operator's evacuation
    opened = detect.open_suspects(fleet, conf, None, utcnow())
    assert opened == [HOSTS[2]]


def test_a_suspect_host_an_operator_takes_is_cleared_not_fenced(fleet, conf):
    for name in HOSTS[:2]:
        _silence(fleet, name)
    assert detect.open_suspects(fleet, conf, None, utcnow()) == HOSTS[:2]
    with fleet.session() as session:
        _host(session, HOSTS[0]).state = states.HOST_DOWN
        _host(session, HOSTS[0]).state_reason = "rack power, by hand"
        _host(session, HOSTS[1]).evacuation_id = "ev-operator00"
    detect.confirm(fleet, conf, None, None, utcnow())
    with fleet.read_session() as session:
        found = {r.host: r for r in session.query(rows.Recovery)}
        assert {r.status for r in found.values()} == {rows.CLEARED}
        assert all("by an operator" in r.detail for r in found.values())
        # The operator's reason is theirs.
        assert _host(session, HOSTS[0]).state_reason == "rack power, by hand"


def test_fence_loses_to_an_operator_who_set_the_host_first(fleet, conf):
    _silence(fleet, HOSTS[0])
    detect.open_suspects(fleet, conf, None, utcnow())
    with fleet.session() as session:
        [recovery] = rows.open_recoveries(session)
        recovery.status = rows.DEAD
        _host(session, HOSTS[0]).state = states.HOST_MAINTENANCE
    assert act.fence(fleet, None, None, [HOSTS[0]]) is None
    with fleet.read_session() as session:
        assert _host(session, HOSTS[0]).state == states.HOST_MAINTENANCE
        [recovery] = session.query(rows.Recovery).all()
        assert recovery.status == rows.CLEARED


def test_after_a_crash_an_operator_s_own_evacuation_wins(fleet, conf):
    """Fenced, the monitor died; an operator evacuated the host by hand (and it ended):
    the next monitor must not evacuate it a second time."""
    recovery_id, _ours = _fenced(fleet, HOSTS[0])
    with fleet.session() as session:
        evacuation_rows.create(session, evacuation_id="ev-byhand0000", hosts=[HOSTS[0]],
                               mode=states.MODE_REBUILD, on_error="pause", max_parallel=8,
                               fallback=states.FALLBACK_NONE, target_hosts=None,
                               reason="by hand", user_id="operator", servers=[])
        _host(session, HOSTS[0]).state_reason = "by hand"
    evacuations = RecordingEvacuations()
    act.evacuate(fleet, conf, evacuations, None, None)
    assert evacuations.requests == []
    shown = _recovery(fleet, recovery_id)
    assert shown["status"] == rows.CLEARED
    assert "an operator" in shown["detail"]


def test_after_a_crash_a_host_an_operator_set_again_is_left_alone(fleet, conf):
    recovery_id, _ours = _fenced(fleet, HOSTS[0])
    with fleet.session() as session:
        _host(session, HOSTS[0]).state = states.HOST_MAINTENANCE
        _host(session, HOSTS[0]).state_reason = "hardware check"
    evacuations = RecordingEvacuations()
    act.evacuate(fleet, conf, evacuations, None, None)
    assert evacuations.requests == []
    assert _recovery(fleet, recovery_id)["status"] == rows.CLEARED


def test_after_a_crash_the_fenced_host_s_recorded_evacuation_is_created(fleet, conf):
    recovery_id, ours = _fenced(fleet, HOSTS[0])
    evacuations = RecordingEvacuations()
    act.evacuate(fleet, conf, evacuations, None, None)
    assert [(r.hosts, r.evacuation_id, r.reason) for r in evacuations.requests] == [
        ([HOSTS[0]], ours, act.REASON)]
    assert _recovery(fleet, recovery_id)["status"] == rows.EVACUATING
