"""Two evacuations, two conductors, one anti-affinity group: the rule holds.

Distributed mode on the real servers (PostgreSQL, Redis jobboard, RabbitMQ):
``fleetflow serve`` (API only), two ``fleetflow conductor`` processes and
one ``fleetflow compute-agent --all`` on a fleet of four hosts:

    source-1   filler, filler, member A     (evacuated by the first request)
    source-2   filler, filler, member B     (evacuated by the second request)
    target-1   empty
    target-2   member C

Both evacuations are live, name the same ``target_hosts`` (target-1,
target-2) and run one move at a time, so each group member moves after its
host's fillers. Each evacuation places all its servers in one pass when it
starts: C holds target-2, so both passes send their member to target-1, the
only host the rule leaves it. Both are posted at the same moment and run on
different conductors; the members' claims come seconds after both passes, so
each pass chose target-1 without seeing the other's member there. Only the
group rule, checked again under the group's row lock when a member claims its
destination, keeps A and B apart: one lands on target-1, the other is refused
(GROUP_POLICY, or NO_VALID_HOST) and stays where it is, and its evacuation
ends PARTIAL. Every filler moves, every server runs once with its allocation
only where it runs, and the strict audit is clean. The same again with the
servers moved in groups (``[conductor] instances_per_atom`` = 2).
"""

from __future__ import annotations

import threading
import time

import pytest
import requests
import sqlalchemy as sa
from distributed_cloud import ADMIN, TENANT, board, owner, small_fleet

pytestmark = [pytest.mark.services, pytest.mark.slow]

FLEET = small_fleet({"r1": 4})
# Servers outside the group on each source, moved before its member.
FILLERS = 2
# Seconds of each live move: the members' claims come FILLERS x this after
# both evacuations placed their servers.
LIVE_SECONDS = 1.5
SETTLED = ("DONE", "PARTIAL", "PAUSED", "FAILED", "REVERTED")
REFUSALS = ("GROUP_POLICY", "NO_VALID_HOST")


@pytest.fixture(params=[None, "2"], ids=["chains", "groups"])
def cloud(distributed_cloud, request):
    # "groups": every evacuation (and reservation) of more than two servers is
    # moved (built) in groups of two, one task a group (docs/evacuation.md).
    per_atom = {"FLEETFLOW_CONDUCTOR_INSTANCES_PER_ATOM": request.param} if request.param else {}
    return distributed_cloud(FLEET, FLEETFLOW_COMPUTE_BOOT_SECONDS="0.1",
                             FLEETFLOW_COMPUTE_LIVE_MIGRATE_SECONDS=str(LIVE_SECONDS),
                             **per_atom)


def _hosts(url: str) -> dict[str, dict]:
    page = requests.get(f"{url}/v2/admin/hosts", headers=ADMIN, timeout=60)
    assert page.status_code == 200, page.text
    return {h["name"]: h for h in page.json()["hosts"]}


def _only_up(url: str, up: list[str]) -> None:
    """Every host but ``up`` in maintenance (and those ``up``)."""
    for name in sorted(_hosts(url)):
        state = "up" if name in up else "maintenance"
        answer = requests.put(f"{url}/v2/admin/hosts/{name}", headers=ADMIN, timeout=60,
                              json={"host": {"state": state, "reason": "test layout"}})
        assert answer.status_code == 200, answer.text


def _reserve(url: str, name: str, count: int, group_id: str | None = None) -> list[str]:
    """``count`` servers, ACTIVE; their uuids."""
    body = {"name": name, "count": count, "flavor_ref": "m1.small", "image_ref": "cirros"}
    if group_id:
        body["group_id"] = group_id
    answer = requests.post(f"{url}/v2/demo/reservations", headers=TENANT, timeout=60,
                           json={"reservation": body})
    assert answer.status_code == 202, answer.text
    location = answer.headers["Location"]
    deadline = time.monotonic() + 120
    while True:
        found = requests.get(location, headers=TENANT, timeout=30).json()["reservation"]
        if found["status"] not in ("PENDING", "SCHEDULING", "BUILDING", "REVERTING"):
            break
        assert time.monotonic() < deadline, found
        time.sleep(0.1)
    assert found["status"] == "ACTIVE", (found["status"], found["fault"])
    return [i["id"] for i in found["instances"]]


def _server_hosts(url: str) -> dict[str, str]:
    """Every server of the tenant and its host, as an administrator reads them."""
    headers = {"X-Project-Id": "demo", "X-Roles": "admin"}
    answer = requests.get(f"{url}/v2/demo/servers", headers=headers, timeout=60,
                          params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    servers = answer.json()["servers"]
    assert all(s["status"] == "ACTIVE" for s in servers), servers
    return {s["id"]: s["host"] for s in servers}


def _evacuate(url: str, source: str, targets: list[str], start: threading.Barrier,
              answers: dict) -> None:
    body = {"evacuation": {"hosts": [source], "mode": "live", "target_hosts": targets,
                           "max_parallel": 1, "on_error": "continue",
                           "reason": "two at once"}}
    start.wait(30)
    answers[source] = requests.post(f"{url}/v2/admin/evacuations", headers=ADMIN,
                                    json=body, timeout=120)


def _settled(procs, location: str) -> dict:
    deadline = time.monotonic() + 300
    while True:
        found = requests.get(location, headers=ADMIN, timeout=30).json()["evacuation"]
        if found["status"] in SETTLED:
            return found
        assert time.monotonic() < deadline, (found, procs.log("c1"), procs.log("c2"))
        time.sleep(0.2)


def test_two_evacuations_on_two_conductors_keep_an_anti_affinity_group_apart(cloud,
                                                                           request):
    procs, url = cloud, cloud.url
    source_1, source_2, target_1, target_2 = sorted(_hosts(url))

    # The layout: fillers first on each source, then one member per host.
    group = requests.post(f"{url}/v2/demo/groups", headers=TENANT, timeout=60, json={
        "group": {"name": "apart", "policies": ["anti-affinity"]}})
    assert group.status_code == 201, group.text
    group_id = group.json()["group"]["id"]
    fillers = []
    for source in (source_1, source_2):
        _only_up(url, [source])
        fillers += _reserve(url, f"fill-{source}", FILLERS)
    _only_up(url, [source_1, source_2, target_2])
    members = _reserve(url, "members", 3, group_id=group_id)
    _only_up(url, [source_1, source_2, target_1, target_2])
    before = _server_hosts(url)
    on = {host: sorted(u for u, h in before.items() if h == host) for host in _hosts(url)}
    member_on = {before[m]: m for m in members}
    assert sorted(member_on) == sorted([source_1, source_2, target_2]), before
    assert len(on[source_1]) == len(on[source_2]) == FILLERS + 1, on
    assert on[target_1] == [], on

    from fleetflow.common import config
    from fleetflow.compute.drivers.fake import FakeDriver

    # The hosts' state file, read as the agent keeps it.
    driver = FakeDriver.from_conf(config.load(args=[], environ=procs.env))
    driver.add_hosts({name: h["inventory"] for name, h in _hosts(url).items()})
    tokens = {g["uuid"]: g["data_token"] for host in _hosts(url)
              for g in driver.list_instances(host)}
    assert sorted(tokens) == sorted(before), tokens

    # Both at the same moment.
    start, answers = threading.Barrier(2), {}
    posters = [threading.Thread(target=_evacuate, args=(url, source, [target_1, target_2],
                                                        start, answers))
               for source in (source_1, source_2)]
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join(180)
    for source in (source_1, source_2):
        assert answers[source].status_code == 202, answers[source].text
    locations = {source: answers[source].headers["Location"]
                 for source in (source_1, source_2)}
    flows = {source: requests.get(location, headers=ADMIN, timeout=30)
             .json()["evacuation"]["flow_id"] for source, location in locations.items()}

    # Each runs on its own conductor.
    jobs = board(procs.env)
    owners: dict[str, str] = {}
    deadline = time.monotonic() + 60
    while len(owners) < 2:
        for source, flow_id in flows.items():
            if source not in owners:
                found = owner(jobs, flow_id)
                if found:
                    owners[source] = found
        assert time.monotonic() < deadline, (
            owners, [requests.get(location, headers=ADMIN, timeout=30).json()
                     for location in locations.values()], procs.log("c1"), procs.log("c2"))
        time.sleep(0.05)
    jobs.close()
    assert sorted(o.split("-")[0] for o in owners.values()) == ["c1", "c2"], owners

    done = {source: _settled(procs, location) for source, location in locations.items()}

    # The shape asked for: groups of two (batch-0000, batch-0002), or a chain a server.
    engine = sa.create_engine(procs.env["FLEETFLOW_DATABASE_CONNECTION"])
    with engine.connect() as conn:
        for flow_id in flows.values():
            names = set(conn.scalars(sa.text(
                "SELECT name FROM tf_atomdetails WHERE parent_uuid = :flow"), {"flow": flow_id}))
            grouped = {"batch-0000", "batch-0002"} <= names
            chained = "srv-0000-move" in names
            assert (grouped, chained) == ((True, False) if request.node.callspec.id == "groups"
                                          else (False, True)), sorted(names)
    engine.dispose()

    # One member took target-1, the other was refused there and stayed home.
    statuses = sorted(e["status"] for e in done.values())
    assert statuses == ["DONE", "PARTIAL"], {s: (e["status"], e["instances"])
                                             for s, e in done.items()}
    moves = {m["id"]: m for e in done.values() for m in e["instances"]}
    assert sorted(moves) == sorted(on[source_1] + on[source_2])
    failed = [m for m in moves.values() if m["status"] != "DONE"]
    assert len(failed) == 1, moves
    loser = failed[0]
    assert loser["id"] in members and loser["status"] == "FAILED", loser
    # Its evacuation had chosen target-1 too: the claim refused it there.
    assert loser["hosts_tried"] == [target_1], loser
    assert loser["fault"]["code"] in REFUSALS, loser
    assert (loser["fault"]["step"], loser["fault"]["host"]) == ("claim", target_1), loser
    winner = next(m for m in members if m in moves and m != loser["id"])
    assert moves[winner]["destination"] == target_1, moves[winner]
    for uuid in fillers:
        assert moves[uuid]["status"] == "DONE", moves[uuid]
        assert moves[uuid]["destination"] in (target_1, target_2), moves[uuid]

    # No two members share a host.
    after = _server_hosts(url)
    assert sorted(after) == sorted(before)
    member_hosts = [after[m] for m in members]
    assert len(set(member_hosts)) == len(members), member_hosts
    assert after[loser["id"]] == loser["source"]
    assert after[winner] == target_1
    group = requests.get(f"{url}/v2/demo/groups/{group_id}", headers=TENANT, timeout=30)
    assert sorted(group.json()["group"]["members"]) == sorted(members)

    # One running copy per server, where the server row says, with its data;
    # its allocation there only; the live moves happened once.
    hosts = _hosts(url)
    copies: dict[str, list[str]] = {}
    for host in hosts:
        for guest in driver.list_instances(host):
            copies.setdefault(guest["uuid"], []).append(host)
            assert guest["state"] == "ACTIVE", guest
            assert guest["data_token"] == tokens[guest["uuid"]], guest
    assert copies == {uuid: [host] for uuid, host in after.items()}, copies
    for uuid, host in after.items():
        allocations = requests.get(f"{url}/placement/allocations/{uuid}", headers=ADMIN,
                                   timeout=30).json()["allocations"]
        assert list(allocations) == [hosts[host]["uuid"]], (uuid, host, allocations)
        assert driver.move_count(uuid) == (0 if uuid == loser["id"] or uuid not in moves
                                           else 1), uuid
    driver.close()

    # The sources are free again (a settled evacuation releases its hosts).
    assert hosts[source_1]["evacuation_id"] is None and hosts[source_2]["evacuation_id"] is None
    audit = requests.get(f"{url}/v2/admin/audit", params={"strict": "true"},
                         headers=ADMIN, timeout=120).json()["audit"]
    assert audit["clean"], audit["mismatches"]
