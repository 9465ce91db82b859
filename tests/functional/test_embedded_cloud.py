"""The embedded cloud of ``fleetflow serve``, driven over real HTTP.

API, conductor threads, the SQL jobboard and the simulated fleet run in this
process exactly as ``fleetflow serve`` runs them; the test talks to the API
on 127.0.0.1 and waits for flows to settle as a client would.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from fleetflow.cli.serve import Cloud
from fleetflow.compute import messaging
from tests.functional.embedded import small_fleet

# A whole cloud served over HTTP, its reservations run to their end.
pytestmark = pytest.mark.slow

SETTLED = {"ACTIVE", "PARTIAL", "ERROR", "REVERTED", "DELETED", "PAUSED"}


@pytest.fixture
def start_cloud(make_conf, tmp_path):
    clouds = []

    def _start(racks, workers=2):
        conf = make_conf(api={"port": 0}, conductor={"workers": workers},
                         fleet={"file": small_fleet(tmp_path, racks)},
                         jobboard={"claim_expiry": 10, "keepalive_interval": 1.0})
        cloud = Cloud(conf).start()
        threading.Thread(target=cloud.serve_forever, daemon=True).start()
        clouds.append(cloud)
        return cloud

    yield _start
    for cloud in clouds:
        cloud.stop()
        messaging.forget_transport(cloud.conf)


def _headers(tenant="demo", roles="member"):
    return {"X-Project-Id": tenant, "X-Roles": roles}


def _wait(url: str, timeout: float = 600.0) -> dict:
    return _wait_all([url], timeout)[0]


def _wait_all(urls: list[str], timeout: float = 600.0) -> list[dict]:
    """Each reservation's body once all have settled, polled as one client would.

    One list GET a pass for the statuses of them all: a poller per reservation, by
    the dozen, would take the interpreter from the conductors that run the flows in
    this process. (All of ``urls`` are one project's reservations.)
    """
    listing = urls[0].rsplit("/", 1)[0]
    waiting = {url.rsplit("/", 1)[1] for url in urls}
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        page = requests.get(listing, params={"limit": 1000}, headers=_headers(),
                            timeout=10).json()["reservations"]
        waiting -= {r["id"] for r in page if r["status"] in SETTLED}
        if waiting:
            time.sleep(0.2)
    return [requests.get(url, headers=_headers(), timeout=10).json()["reservation"]
            for url in urls]


def test_reservation_over_http_goes_active_then_is_deleted(start_cloud):
    cloud = start_cloud([{"name": "r1", "hosts": 4, "profile": "small"}])
    base = f"{cloud.url}/v2/demo"
    answer = requests.post(f"{base}/reservations", headers=_headers(), json={"reservation": {
        "name": "web", "count": 6, "flavor_ref": "m1.small", "image_ref": "cirros"}})
    assert answer.status_code == 202, answer.text
    url = answer.headers["Location"]
    body = _wait(url)
    assert body["status"] == "ACTIVE", body
    assert body["progress"] == {"total": 6, "active": 6, "building": 0, "error": 0,
                                "reverted": 0, "deleted": 0}
    assert all(i["host"] and i["attempts"] == 1 for i in body["instances"])
    servers = requests.get(f"{base}/servers", params={"reservation_id": body["id"]},
                           headers=_headers()).json()["servers"]
    assert len(servers) == 6
    assert requests.delete(url, headers=_headers()).status_code == 202
    body = _wait(url)
    assert body["status"] == "DELETED", body
    assert (body["progress"]["deleted"], body["progress"]["reverted"]) == (6, 0)
    assert cloud.compute.list_instances("z1-r1-h01") == []


def test_fifty_concurrent_reservations_keep_anti_affinity(start_cloud):
    # Exactly 50 hosts carry the blue sticker; 10 more do not and must stay empty.
    cloud = start_cloud([
        {"name": f"r{i}", "hosts": 10, "profile": "small", "capabilities": {"sticker": "blue"}}
        for i in range(1, 6)] + [{"name": "r9", "hosts": 10, "profile": "small"}],
        workers=6)
    base = f"{cloud.url}/v2/demo"
    group = requests.post(f"{base}/groups", headers=_headers(), json={
        "group": {"name": "spread", "policies": ["anti-affinity"]}}).json()["group"]

    def reserve(i):
        answer = requests.post(f"{base}/reservations", headers=_headers(), json={
            "reservation": {"name": f"one-{i}", "count": 1, "flavor_ref": "m1.small",
                            "image_ref": "cirros", "group_id": group["id"],
                            "capabilities": {"sticker": "blue"}}})
        assert answer.status_code == 202, answer.text
        return answer.headers["Location"]

    with ThreadPoolExecutor(max_workers=16) as pool:
        urls = list(pool.map(reserve, range(50)))
    bodies = _wait_all(urls)
    assert [b["status"] for b in bodies] == ["ACTIVE"] * 50, [
        (b["status"], b["fault"]) for b in bodies if b["status"] != "ACTIVE"]
    hosts = [b["instances"][0]["host"] for b in bodies]
    assert len(set(hosts)) == 50
    assert not any(h.startswith("z1-r9-") for h in hosts)
    members = requests.get(f"{base}/groups/{group['id']}", headers=_headers()).json()
    assert len(members["group"]["members"]) == 50
