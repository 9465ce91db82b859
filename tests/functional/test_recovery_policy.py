"""What automatic recovery moves and where to, in the embedded cloud over real HTTP.

As tests/functional/test_recovery.py: the cloud runs its own recovery monitor
and the tests only kill hosts and read the API. Here the servers are steered
by their metadata (``ha``, ``recovery=never``, ``recovery_priority``) and the
destinations by ``[recovery] where`` (a reserve pool kept in maintenance, the
dead host's zone).
"""

from __future__ import annotations

import pytest
import requests
import yaml

from tests.functional.embedded import serving, until

pytestmark = pytest.mark.slow

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
MEMBER = {"X-Project-Id": "demo", "X-Roles": "member"}
OPEN = ("SUSPECT", "DEAD", "HELD", "FENCED", "EVACUATING")


def _fleet(tmp_path, zones: dict[str, list[dict]]) -> str:
    """Small hosts (8 VCPU, room for 8 m1.small): ``{zone: [rack, ...]}``."""
    doc = {
        "profiles": {"small": {"inventory": {
            "VCPU": {"total": 8, "allocation_ratio": 1.0},
            "MEMORY_MB": {"total": 16384, "allocation_ratio": 1.0},
            "DISK_GB": {"total": 200, "allocation_ratio": 1.0}}}},
        "regions": [{"name": "north-america", "zones": [
            {"name": zone, "racks": [{"profile": "small", **rack} for rack in racks]}
            for zone, racks in zones.items()]}],
        "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048,
                     "disk_gb": 20}],
        "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def start(make_conf, tmp_path):
    stack = []

    def _start(zones, **recovery):
        conf = make_conf(
            api={"port": 0}, conductor={"workers": 2}, fleet={"file": _fleet(tmp_path, zones)},
            compute={"service_down_time": 2, "heartbeat_interval": 0.25},
            jobboard={"claim_expiry": 10, "keepalive_interval": 1.0},
            recovery={"enabled": True, "confirm_seconds": 1.0, "interval": 0.2, **recovery})
        context = serving(conf)
        stack.append(context)
        return context.__enter__()

    yield _start
    for context in reversed(stack):
        context.__exit__(None, None, None)


def _call(cloud, method, path, headers=ADMIN, body=None, status=200):
    answer = requests.request(method, f"{cloud.url}{path}", headers=headers, json=body,
                              timeout=10)
    assert answer.status_code == status, answer.text
    return answer.json() if answer.content else None


def _hosts(cloud) -> dict[str, dict]:
    return {h["name"]: h for h in _call(cloud, "GET", "/v2/admin/hosts")["hosts"]}


def _set_state(cloud, host, state):
    _call(cloud, "PUT", f"/v2/admin/hosts/{host}",
          body={"host": {"state": state, "reason": "test"}})


def _reserve_on(cloud, host: str, count: int, metadata=None) -> list[dict]:
    """``count`` servers all on ``host``: every other ``up`` host is in maintenance
    meanwhile, as an operator would do it; they are ``up`` again afterwards."""
    others = [name for name, h in _hosts(cloud).items() if name != host and h["state"] == "up"]
    for name in others:
        _set_state(cloud, name, "maintenance")
    body = {"count": count, "flavor_ref": "m1.small", "image_ref": "cirros"}
    if metadata:
        body["metadata"] = metadata
    url = requests.post(f"{cloud.url}/v2/demo/reservations", headers=MEMBER, timeout=10,
                        json={"reservation": body}).headers["Location"]
    done = until(lambda: requests.get(url, headers=MEMBER, timeout=10).json()["reservation"],
                 lambda r: r["status"] not in ("PENDING", "SCHEDULING", "BUILDING"))
    assert done["status"] == "ACTIVE", done
    for name in others:
        _set_state(cloud, name, "up")
    assert {i["host"] for i in done["instances"]} == {host}
    return done["instances"]


def _kill(cloud, host):
    _call(cloud, "POST", f"/v2/admin/hosts/{host}/simulate", body={"simulate": {"dead": True}})


def _recovered(cloud, host, timeout=60.0) -> dict:
    [recovery] = until(
        lambda: [r for r in _call(cloud, "GET", "/v2/admin/recoveries")["recoveries"]
                 if r["host"] == host],
        lambda found: found and found[0]["status"] not in OPEN, timeout=timeout)
    assert recovery["status"] == "DONE", recovery
    return recovery


def _servers(cloud) -> dict[str, dict]:
    return {s["id"]: s for s in _call(cloud, "GET", "/v2/demo/servers", MEMBER)["servers"]}


def _metadata(cloud, server, method, metadata):
    return _call(cloud, method, f"/v2/demo/servers/{server}/metadata", MEMBER,
                 {"metadata": metadata})


def test_ha_servers_move_in_priority_order_and_the_others_stay(start):
    cloud = start({"z1": [{"name": "r1", "hosts": 4}, {"name": "r2", "hosts": 4}]},
                  servers="ha")
    victim = "z1-r1-h01"
    low, high, never, plain, middle = (s["id"] for s in _reserve_on(
        cloud, victim, 5, metadata={"ha": "true"}))
    _metadata(cloud, low, "POST", {"recovery_priority": "1"})
    _metadata(cloud, high, "POST", {"recovery_priority": "9"})
    _metadata(cloud, middle, "POST", {"recovery_priority": "5"})
    _metadata(cloud, never, "POST", {"recovery": "never"})
    assert _metadata(cloud, plain, "PUT", {"owner": "batch"}) == {
        "metadata": {"owner": "batch"}}  # PUT replaced ha=true: not ha any more

    plan = _call(cloud, "GET", f"/v2/admin/hosts/{victim}/recovery-plan")["recovery_plan"]
    assert [i["id"] for i in plan["instances"]] == [high, middle, low]
    assert {s["id"]: s["why"] for s in plan["staying"]} == {
        never: "recovery=never", plain: "not ha=true ([recovery] servers = ha)"}

    _kill(cloud, victim)
    recovery = _recovered(cloud, victim)
    evacuation = _call(cloud, "GET",
                       f"/v2/admin/evacuations/{recovery['evacuation_id']}")["evacuation"]
    # Moves are made in the evacuation's order: priority, higher first.
    assert [m["id"] for m in evacuation["instances"]] == [high, middle, low]
    servers = _servers(cloud)
    assert all(servers[s]["status"] == "ACTIVE" and servers[s]["host"] != victim
               for s in (high, middle, low))
    assert servers[never]["host"] == victim and servers[plain]["host"] == victim
    timeline = _call(cloud, "GET", f"/v2/admin/recoveries/{recovery['id']}")["recovery"][
        "timeline"]
    [started] = [e for e in timeline if e["event"] == "evacuation"]
    assert "3 servers, 2 left" in started["detail"] and never in started["detail"]
    # The servers left behind are the audit's to report, and only they. A server
    # on a host that reads down is stranded too, and with service_down_time at 2 s
    # a loaded machine can leave a living host a heartbeat late: audit once every
    # host but the victim reads up.
    until(lambda: _call(cloud, "GET", "/v2/admin/hosts")["hosts"],
          lambda hosts: all(h["state"] == "up" for h in hosts if h["name"] != victim))
    report = _call(cloud, "GET", "/v2/admin/audit")["audit"]
    assert sorted(m["subject"] for m in report["mismatches"]
                  if m["kind"] == "stranded_instance") == sorted([never, plain])


def test_the_reserve_pool_in_maintenance_is_planned_brought_up_and_used_first(start):
    cloud = start({"z1": [{"name": "r1", "hosts": 5},
                          {"name": "rs", "hosts": 2, "capabilities": {"reserve_pool": "spare"}}]},
                  where="reserve", reserve_pool="spare")
    reserve = ["z1-rs-h01", "z1-rs-h02"]
    for name in reserve:
        _set_state(cloud, name, "maintenance")
    victim = "z1-r1-h01"
    placed = _reserve_on(cloud, victim, 6)
    # The operator's own hosts stay in maintenance after the reservation.
    assert {_hosts(cloud)[name]["state"] for name in reserve} == {"maintenance"}

    plan = _call(cloud, "GET", f"/v2/admin/hosts/{victim}/recovery-plan")["recovery_plan"]
    assert plan["fits"] and plan["where"] == "reserve"
    assert {i["destination"] for i in plan["instances"]} <= set(reserve)
    assert len(plan["instances"]) == 6

    _kill(cloud, victim)
    recovery = _recovered(cloud, victim)
    servers = _servers(cloud)
    assert {servers[s["id"]]["host"] for s in placed} <= set(reserve)
    assert all(servers[s["id"]]["status"] == "ACTIVE" for s in placed)
    assert {_hosts(cloud)[name]["state"] for name in reserve} == {"up"}
    evacuation = _call(cloud, "GET",
                       f"/v2/admin/evacuations/{recovery['evacuation_id']}")["evacuation"]
    assert sorted(evacuation["target_hosts"]) == reserve


def test_where_zone_keeps_the_servers_in_the_dead_host_s_zone(start):
    # z2 is empty and the weigher spreads: only [recovery] where keeps them in z1.
    cloud = start({"z1": [{"name": "r1", "hosts": 3}], "z2": [{"name": "r1", "hosts": 3}]},
                  where="zone", max_dead_fraction=0.5)
    victim = "z1-r1-h01"
    placed = _reserve_on(cloud, victim, 4)
    plan = _call(cloud, "GET", f"/v2/admin/hosts/{victim}/recovery-plan")["recovery_plan"]
    assert plan["fits"] and {i["destination"] for i in plan["instances"]} <= {
        "z1-r1-h02", "z1-r1-h03"}
    _kill(cloud, victim)
    _recovered(cloud, victim)
    servers = _servers(cloud)
    assert {servers[s["id"]]["host"] for s in placed} <= {"z1-r1-h02", "z1-r1-h03"}
    assert all(servers[s["id"]]["status"] == "ACTIVE" for s in placed)
