"""Flow routes in the embedded cloud of ``fleetflow serve``, over real HTTP.

Real parts throughout: fleetflow's logbook backend on SQLite, the SQL jobboard,
conductor threads, the simulated fleet. A provision flow submitted with
``on_error = pause`` stops once its instance has run out of hosts; the
operator resumes it over the API and the reservation goes ACTIVE.
"""

from __future__ import annotations

import threading
import time

import pytest
import requests
import yaml

from fleetflow.cli.serve import Cloud
from fleetflow.compute import messaging

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
HOSTS = ["z1-r1-h01", "z1-r1-h02"]


@pytest.fixture
def cloud(make_conf, tmp_path):
    doc = {
        "profiles": {"small": {"inventory": {
            "VCPU": {"total": 8, "allocation_ratio": 1.0},
            "MEMORY_MB": {"total": 16384, "allocation_ratio": 1.0},
            "DISK_GB": {"total": 200, "allocation_ratio": 1.0}}}},
        "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
            {"name": "r1", "hosts": 2, "profile": "small"}]}]}],
        "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048,
                     "disk_gb": 20}],
        "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
    }
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    conf = make_conf(api={"port": 0}, conductor={"workers": 1}, fleet={"file": str(fleet)},
                     jobboard={"claim_expiry": 10, "keepalive_interval": 1.0})
    cloud = Cloud(conf).start()
    threading.Thread(target=cloud.serve_forever, daemon=True).start()
    yield cloud
    cloud.stop()
    messaging.forget_transport(conf)


def _until(get, predicate, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if predicate(value):
            return value
        assert time.monotonic() < deadline, f"not reached: {value}"
        time.sleep(0.2)


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
