"""Flow routes in the embedded cloud of ``fleetflow serve``, over real HTTP.

Real parts throughout: fleetflow's logbook backend on SQLite, the SQL jobboard,
conductor threads, the simulated fleet. A provision flow submitted with
``on_error = pause`` stops once its instance has run out of hosts; the
operator resumes it over the API and the reservation goes ACTIVE.
"""

from __future__ import annotations

import pytest
import requests

from tests.functional.embedded import serving, small_fleet, until

# A whole cloud served over HTTP, its flows paused and resumed.
pytestmark = pytest.mark.slow

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
HOSTS = ["z1-r1-h01", "z1-r1-h02"]


@pytest.fixture
def cloud(make_conf, tmp_path):
    conf = make_conf(api={"port": 0}, conductor={"workers": 1},
                     fleet={"file": small_fleet(tmp_path, 2)},
                     jobboard={"claim_expiry": 10, "keepalive_interval": 1.0})
    with serving(conf) as cloud:
        yield cloud


def _until(get, predicate, timeout=120.0):
    return until(get, predicate, timeout, interval=0.2)


MEMBER = {"X-Project-Id": "demo", "X-Roles": "member"}


def _reserve_paused(cloud) -> tuple[str, str]:
    """A one-instance reservation that asks for its flow to pause on error."""
    answer = requests.post(f"{cloud.url}/v2/demo/reservations", headers=MEMBER, timeout=10,
                           json={"reservation": {"count": 1, "flavor_ref": "m1.small",
                                                 "image_ref": "cirros", "on_error": "pause"}})
    assert answer.status_code == 202, answer.text
    rid = answer.json()["reservation"]["id"]
    return rid, _reservation(cloud, rid)["flow_id"]


def _reservation(cloud, rid) -> dict:
    return requests.get(f"{cloud.url}/v2/demo/reservations/{rid}", headers=MEMBER,
                        timeout=10).json()["reservation"]


def test_an_operator_resumes_a_paused_provision_over_http(cloud):
    # Both hosts' next boot fails once: the instance runs out of hosts, and the
    # retry's failure to find another one is what pauses the flow.
    for host in HOSTS:
        cloud.compute.set_faults(host, fail_next=1)
    rid, flow_id = _reserve_paused(cloud)
    assert flow_id

    def flow():
        return requests.get(f"{cloud.url}/v2/admin/flows/{flow_id}", headers=ADMIN,
                            timeout=10).json()["flow"]

    paused = _until(flow, lambda f: f["state"] == "PAUSED")
    assert paused["name"] == "provision" and paused["owner_tenant"] == "demo"
    assert paused["failure"]["step"] == "inst-0000-retry"
    listed = requests.get(f"{cloud.url}/v2/admin/flows", params={"state": "PAUSED"},
                          headers=ADMIN, timeout=10).json()["flows"]
    assert [f["id"] for f in listed] == [flow_id]

    answer = requests.post(f"{cloud.url}/v2/admin/flows/{flow_id}/resume", headers=ADMIN,
                           timeout=10)
    assert answer.status_code == 202, answer.text
    assert _until(flow, lambda f: f["state"] in ("SUCCESS", "REVERTED", "PAUSED"))[
        "state"] == "SUCCESS"
    assert _reservation(cloud, rid)["status"] == "ACTIVE"

    # The owner sees it under its own path; another tenant does not.
    mine = requests.get(f"{cloud.url}/v2/demo/flows/{flow_id}",
                        headers={"X-Project-Id": "demo", "X-Roles": "reader"}, timeout=10)
    assert mine.status_code == 200 and mine.json()["flow"]["state"] == "SUCCESS"
    other = requests.get(f"{cloud.url}/v2/other/flows/{flow_id}",
                         headers={"X-Project-Id": "other", "X-Roles": "reader"}, timeout=10)
    assert other.status_code == 404


def test_an_operator_reverts_a_paused_reservation_over_http(cloud):
    for host in HOSTS:
        cloud.compute.set_faults(host, fail_next=1)
    rid, flow_id = _reserve_paused(cloud)

    def flow():
        return requests.get(f"{cloud.url}/v2/admin/flows/{flow_id}", headers=ADMIN,
                            timeout=10).json()["flow"]

    assert _until(flow, lambda f: f["state"] == "PAUSED")["on_error"] == "pause"
    assert _until(lambda: _reservation(cloud, rid), lambda r: r["status"] == "PAUSED")
    answer = requests.post(f"{cloud.url}/v2/admin/flows/{flow_id}/revert", headers=ADMIN,
                           timeout=10)
    assert answer.status_code == 202, answer.text
    assert _until(flow, lambda f: f["state"] in ("SUCCESS", "REVERTED"))["state"] == "REVERTED"
    reservation = _until(lambda: _reservation(cloud, rid),
                         lambda r: r["status"] == "REVERTED")
    assert [i["status"] for i in reservation["instances"]] == ["REVERTED"]
    assert reservation["fault"] is not None
