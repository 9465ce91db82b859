"""Automatic recovery on a real Nova: a stopped nova-compute is recovered with no call.

The heartbeat is Nova's (os-services ``updated_at``, read by the monitor every
pass), and a host is suspect only once Nova's own servicegroup reads it down:
fleetflow's ``service_down_time`` here is shorter than the harness's Nova's, so
a monitor that judged by the beat alone would suspect the host, find Nova still
answering and log a flap, and could evacuate before Nova agrees
(Masakari's ``ComputeServiceInUse``). Neither may happen.
"""

from __future__ import annotations

import datetime as dt

from tests.openstack import checks
from tests.openstack.serve import NOVA_SERVICE_DOWN_TIME
from tests.openstack.test_evacuations import _assert_moved_off, _pooled_servers
from tests.reliability.serve_process import ADMIN

#: Detection waits for Nova's service_down_time (20 s) plus the confirmation; the
#: rebuilds then run on a harness that may share two cores with a whole suite.
RECOVERED_SECONDS = 300
#: The harness's Nova beats every 2 s (fleetflow.testing.nova_harness); one more for
#: the clocks of two processes read a moment apart.
REPORT_INTERVAL = 3


def _recoveries(fleetflow, host: str) -> list[dict]:
    return fleetflow.call("GET", f"/v2/admin/recoveries?host={host}",
                          headers=ADMIN)["recoveries"]


def _at(stamp: str) -> dt.datetime:
    """fleetflow's UTC timestamp (with its offset) as a naive UTC datetime."""
    return dt.datetime.fromisoformat(stamp).astimezone(dt.UTC).replace(tzinfo=None)


def test_a_stopped_compute_is_fenced_and_its_servers_rebuilt_elsewhere(openstack_cloud,
                                                                      fleetflow_on):
    conn, fleetflow, group, source = _pooled_servers(
        openstack_cloud, fleetflow_on, FLEETFLOW_RECOVERY_ENABLED="true",
        FLEETFLOW_RECOVERY_INTERVAL="1", FLEETFLOW_RECOVERY_CONFIRM_SECONDS="2",
        FLEETFLOW_COMPUTE_SERVICE_DOWN_TIME="6", FLEETFLOW_COMPUTE_HEARTBEAT_INTERVAL="2",
        FLEETFLOW_OPENSTACK_SYNC_INTERVAL="3")
    assert _recoveries(fleetflow, source) == []

    stopped_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    openstack_cloud.stop_host(source)
    recovered = checks.wait(
        lambda: [r for r in _recoveries(fleetflow, source) if r["status"] == "DONE"],
        timeout=RECOVERED_SECONDS, what=f"{source} recovered by the monitor")

    # One detection, never a flap: nothing was suspected while Nova read it up.
    assert [r["status"] for r in _recoveries(fleetflow, source)] == ["DONE"]
    recovery = fleetflow.call("GET", f"/v2/admin/recoveries/{recovered[0]['id']}",
                              headers=ADMIN)["recovery"]
    events = [e["event"] for e in recovery["timeline"]]
    assert events[:4] == ["suspect", "dead", "fenced", "evacuation"], events
    service = next(s for s in conn.compute.services(binary="nova-compute")
                   if s.host == source)
    # Fenced only once Nova's servicegroup could read it down (its last beat was at
    # most a report interval before the stop), and Nova agrees now.
    silent = (_at(recovery["fenced_at"]) - stopped_at).total_seconds()
    assert silent >= NOVA_SERVICE_DOWN_TIME - REPORT_INTERVAL, recovery["timeline"]
    assert service.is_forced_down and service.status == "disabled"

    evacuation = fleetflow.evacuation(recovery["evacuation_id"])
    assert (evacuation["status"], evacuation["mode"]) == ("DONE", "rebuild"), evacuation
    assert evacuation["hosts"] == [source]
    assert evacuation["reason"] == "automatic recovery"
    _assert_moved_off(conn, fleetflow, group, source)
    host = next(h for h in fleetflow.call("GET", "/v2/admin/hosts", headers=ADMIN)["hosts"]
                if h["name"] == source)
    assert host["state"] == "down"  # fenced: it stays so until an operator sets it up
