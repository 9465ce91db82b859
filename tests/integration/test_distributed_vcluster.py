"""A virtual cluster built in groups in distributed mode, then deleted.

On the real servers (PostgreSQL, Redis jobboard, RabbitMQ): ``fleetflow
serve`` (API only), two ``fleetflow conductor`` processes and one
``fleetflow compute-agent --all``, with ``[conductor] instances_per_atom`` = 2:
three servers apart, each with its volume beside it, the volumes apart
(six members, one server and its volume a rack), are
built by three group tasks (``batch-0000``, ``batch-0002``, ``batch-0004``),
the first server's first host refusing one build so that its group moves it
to an alternate. The cluster is ACTIVE with every grouping satisfied, each
member built once where the API says, and the strict audit is clean; its
delete leaves nothing held.
"""

from __future__ import annotations

import time

import pytest
import requests
import sqlalchemy as sa
from distributed_cloud import ADMIN, TENANT, small_fleet

pytestmark = [pytest.mark.services, pytest.mark.slow]

FLEET = small_fleet({f"r{r}": 3 for r in (1, 2, 3)},
                    rack_storage={"capacity_gb": 1000, "volume_types": ["ssd"]})
SERVERS = 3
URL = "/v2/demo/vclusters"
OPERATOR = {"X-Project-Id": "demo", "X-Roles": "admin"}


def _body() -> dict:
    instances, groupings = [], []
    for i in range(1, SERVERS + 1):
        instances += [{"name": f"s{i}", "type": "server",
                       "spec": {"imageRef": "cirros", "flavorRef": "m1.small"}},
                      {"name": f"v{i}", "type": "volume", "spec": {"size": 10}}]
        groupings.append({"name": f"pair-{i}", "membersRef": [f"s{i}", f"v{i}"],
                          "spec": {"rule": "affinity"}})
    # Volumes on different racks' backends: each server has its rack's other hosts left.
    for kind in ("s", "v"):
        groupings.append({"name": f"{kind}-apart", "spec": {"rule": "anti-affinity"},
                          "membersRef": [f"{kind}{i}" for i in range(1, SERVERS + 1)]})
    return {"vcluster": {"name": "grouped", "instances": instances, "groupings": groupings}}


def _settled(procs, url: str, vcluster_id: str, until: tuple[str, ...]) -> dict:
    """The cluster once settled, as an administrator sees it (host names shown)."""
    deadline = time.monotonic() + 180
    while True:
        found = requests.get(f"{url}{URL}/{vcluster_id}", headers=OPERATOR, timeout=30)
        view = found.json()["vcluster"]
        if view["status"] in until:
            return view
        assert time.monotonic() < deadline, (view, procs.log("c1"), procs.log("c2"))
        time.sleep(0.1)


def _audit(url: str) -> dict:
    return requests.get(f"{url}/v2/admin/audit", params={"strict": "true"}, headers=ADMIN,
                        timeout=120).json()["audit"]


def test_a_cluster_built_in_groups_across_conductors_then_deleted(distributed_cloud):
    procs = distributed_cloud(FLEET, FLEETFLOW_COMPUTE_BOOT_SECONDS="0.2",
                              FLEETFLOW_CONDUCTOR_INSTANCES_PER_ATOM="2")
    url = procs.url
    dry = requests.post(f"{url}{URL}", headers=OPERATOR, params={"dry_run": "true"},
                        json=_body(), timeout=60)
    assert dry.status_code == 200, dry.text
    first = next(i for i in dry.json()["dry_run"]["instances"] if i["name"] == "s1")
    assert first["alternates"], dry.json()["dry_run"]["explanation"]

    from fleetflow.common import config
    from fleetflow.compute.drivers.fake import FakeDriver
    from fleetflow.compute.rpcapi import ComputeAPI
    from fleetflow.persistence.db import get_database

    # The first choice refuses one build (asked of the agent over RabbitMQ).
    conf = config.load(args=[], environ=procs.env)
    database = get_database(conf)
    ComputeAPI(conf, database).set_faults(first["host"], fail_next=1)
    database.dispose()
    # The hosts' state file, as the agent keeps it.
    driver = FakeDriver.from_conf(conf)
    hosts = requests.get(f"{url}/v2/admin/hosts", headers=ADMIN, timeout=60).json()["hosts"]
    driver.add_hosts({h["name"]: h["inventory"] for h in hosts})

    answer = requests.post(f"{url}{URL}", headers=TENANT, json=_body(), timeout=60)
    assert answer.status_code == 202, answer.text
    created = answer.json()["vcluster"]
    view = _settled(procs, url, created["id"], ("ACTIVE", "REVERTED", "ERROR"))
    assert view["status"] == "ACTIVE", (view["status"], view["fault"])
    assert all(g["satisfied"] for g in view["groupings"]), view["groupings"]

    # The shape asked for: three groups of two, no member's own chain.
    engine = sa.create_engine(procs.env["FLEETFLOW_DATABASE_CONNECTION"])
    with engine.connect() as conn:
        names = set(conn.scalars(sa.text(
            "SELECT name FROM tf_atomdetails WHERE parent_uuid = :flow"),
            {"flow": view["flow_id"]}))
    engine.dispose()
    assert {"batch-0000", "batch-0002", "batch-0004"} <= names, sorted(names)
    assert not any(n.startswith(("srv-", "vol-")) for n in names), sorted(names)

    # Each member built once, where the API says; s1 on an alternate.
    members = {m["name"]: m for m in view["instances"]}
    assert members["s1"]["host"] != first["host"], members["s1"]
    for i in range(1, SERVERS + 1):
        server, volume = members[f"s{i}"], members[f"v{i}"]
        assert server["status"] == "ACTIVE" and volume["status"] == "IN-USE", (server, volume)
        assert driver.spawn_count(server["id"], host=server["host"]) == 1, server
        assert driver.get_instance(server["host"], server["id"])["state"] == "ACTIVE"
        assert driver.volume_create_count(volume["id"]) == 1, volume
    assert len({members[f"s{i}"]["host"] for i in range(1, SERVERS + 1)}) == SERVERS
    assert _audit(url)["clean"]

    deleted = requests.delete(f"{url}{URL}/{created['id']}", headers=TENANT, timeout=60)
    assert deleted.status_code == 202, deleted.text
    gone = _settled(procs, url, created["id"], ("DELETED", "PAUSED", "ERROR"))
    assert gone["status"] == "DELETED", (gone["status"], gone["fault"])
    for member in view["instances"]:
        allocations = requests.get(f"{url}/placement/allocations/{member['id']}",
                                   headers=ADMIN, timeout=30).json()["allocations"]
        assert allocations == {}, member
    driver.close()
    audit = _audit(url)
    assert audit["clean"], audit["mismatches"]
