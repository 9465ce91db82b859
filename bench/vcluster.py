"""Virtual clusters: POST to ACTIVE and DELETE to DELETED through ``fleetflow serve``,
and the joint placement alone on a large generated fleet.

``api`` cases start a fresh ``fleetflow serve`` (embedded: SQLite, in-process
conductors, simulated hosts with 0 s boots) on a generated fleet (every rack
has a shared storage backend) and drive only its REST API: one vcluster of N
servers and N volumes, each server affine with its own volume (which attaches
it), servers anti-affine in groups of 10, the volumes of a group anti-affine
(default scope: different racks). It prints the time from the POST to the
poll that saw ACTIVE, the time the server recorded it (``updated_at``), the CPU
seconds the server and its agent processes used meanwhile, and the same times
for its DELETE.

``placement`` cases time ``place_vcluster`` alone (no database): 1,000 servers
and 1,000 volumes shaped the same way on 10,000 hosts with a shared backend
per rack of 40 hosts.

    python bench/vcluster.py                       # the recorded cases (RESULTS.md)
    python bench/vcluster.py --case api-100 --repeat 3
    python bench/vcluster.py --case placement-1000 --repeat 5
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reservation import cpu_seconds, quiet, start_server  # noqa: E402  (the same start-up)

from scheduler import make_fleet  # noqa: E402  (the same generated fleet)

TENANT = {"X-Project-Id": "bench", "X-Roles": "member"}
GROUP = 10
SETTLED = ("ACTIVE", "ERROR", "REVERTED", "DELETED", "PAUSED")
# name: (kind, members of each kind, hosts)
CASES = {
    "api-100": ("api", 100, 200),
    "placement-1000": ("placement", 1000, 10000),
}


def cluster_body(n: int) -> dict:
    """N servers + N volumes: server i affine with volume i; groups of 10 kept apart."""
    instances, groupings = [], []
    for i in range(n):
        instances.append({"name": f"s{i:04d}", "type": "server",
                          "spec": {"imageRef": "cirros", "flavorRef": "m1.tiny"}})
        instances.append({"name": f"v{i:04d}", "type": "volume",
                          "spec": {"size": 1, "volume_type": "ssd"}})
        groupings.append({"name": f"pair-{i:04d}", "membersRef": [f"s{i:04d}", f"v{i:04d}"],
                          "spec": {"rule": "affinity"}})
    for g in range(0, n, GROUP):
        members = range(g, min(n, g + GROUP))
        groupings.append({"name": f"servers-{g // GROUP:03d}",
                          "membersRef": [f"s{i:04d}" for i in members],
                          "spec": {"rule": "anti-affinity"}})
        groupings.append({"name": f"volumes-{g // GROUP:03d}",
                          "membersRef": [f"v{i:04d}" for i in members],
                          "spec": {"rule": "anti-affinity"}})
    return {"vcluster": {"name": f"bench-{n}", "instances": instances, "groupings": groupings}}


def wait_for(url: str, vcluster_id: str, poll: float, until: tuple[str, ...]) -> dict:
    while True:
        page = requests.get(f"{url}/v2/bench/vclusters", headers=TENANT, timeout=60).json()
        entry = next(v for v in page["vclusters"] if v["id"] == vcluster_id)
        if entry["status"] in until:
            return entry
        time.sleep(poll)


def _recorded(entry: dict, wall0: float) -> float:
    updated = datetime.datetime.fromisoformat(entry["updated_at"]).replace(tzinfo=datetime.UTC)
    return updated.timestamp() - wall0


def run_api(n: int, hosts: int, poll: float, again: bool = False) -> dict:
    """One vcluster created then deleted on a fresh cloud. ``again``: then the same
    cluster once more on the same server (``"again"``: its figures), whose imports and
    statement caches the first one warmed."""
    with tempfile.TemporaryDirectory(prefix="ff-bench-vc-") as workdir:
        proc, url = start_server(workdir, hosts, {"FLEETFLOW_COMPUTE_BOOT_SECONDS": "0"})
        try:
            result = _cycle(url, proc.pid, n, poll)
            if again:
                quiet([proc.pid])
                result["again"] = _cycle(url, proc.pid, n, poll)
            return result
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except Exception:  # noqa: BLE001
                proc.kill()


def _cycle(url: str, pid: int, n: int, poll: float) -> dict:
    """Create (measured) and delete (timed) one cluster of ``n`` servers and ``n`` volumes."""
    body = cluster_body(n)
    cpu0 = cpu_seconds(pid)
    t0, wall0 = time.monotonic(), time.time()
    answer = requests.post(f"{url}/v2/bench/vclusters", headers=TENANT, json=body, timeout=300)
    answer.raise_for_status()
    accepted = time.monotonic() - t0
    vcluster_id = answer.json()["vcluster"]["id"]
    entry = wait_for(url, vcluster_id, poll, SETTLED)
    cpu = cpu_seconds(pid)
    built = {"status": entry["status"], "accepted_s": accepted,
             "cpu_s": None if cpu0 is None or cpu is None else cpu - cpu0,
             "total_s": time.monotonic() - t0, "recorded_s": _recorded(entry, wall0)}
    cpu0, t0, wall0 = cpu_seconds(pid), time.monotonic(), time.time()
    requests.delete(f"{url}/v2/bench/vclusters/{vcluster_id}", headers=TENANT,
                    timeout=300).raise_for_status()
    entry = wait_for(url, vcluster_id, poll, ("DELETED", "PAUSED", "ERROR"))
    cpu = cpu_seconds(pid)
    return built | {"deleted": entry["status"], "delete_s": time.monotonic() - t0,
                    "delete_recorded_s": _recorded(entry, wall0),
                    "delete_cpu_s": None if cpu0 is None or cpu is None else cpu - cpu0}


def run_placement(n: int, hosts: int) -> dict:
    from fleetflow.scheduler.vcluster.place import (
        BackendState,
        Grouping,
        ServerMember,
        VolumeMember,
        place_vcluster,
    )

    snapshot = make_fleet(hosts)
    racks = {(h.region, h.zone, h.rack) for h in snapshot.hosts}
    backends = [BackendState(f"{zone}-{rack}-shared", scope="rack", region=region, zone=zone,
                             rack=rack, capacity_gb=50000, volume_types=frozenset({"ssd"}))
                for region, zone, rack in sorted(racks)]
    body = cluster_body(n)["vcluster"]
    servers = [ServerMember(i["name"], {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1})
               for i in body["instances"] if i["type"] == "server"]
    volumes = [VolumeMember(i["name"], 10, "ssd") for i in body["instances"]
               if i["type"] == "volume"]
    groupings = [Grouping(g["name"], g["membersRef"], g["spec"]["rule"])
                 for g in body["groupings"]]
    t0 = time.perf_counter()
    result = place_vcluster(servers, volumes, groupings, snapshot, backends)
    return {"status": "fits" if result.fits else f"no: {result.explanation}",
            "total_s": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", nargs="+", choices=sorted(CASES))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--poll", type=float, default=0.02)
    args = parser.parse_args()
    for name in args.case or CASES:
        kind, n, hosts = CASES[name]
        runs = []
        for _ in range(args.repeat):
            r = run_api(n, hosts, args.poll) if kind == "api" else run_placement(n, hosts)
            runs.append(r)
            if kind == "api":
                print(f"{name}: {n}+{n} on {hosts} hosts: {r['status']} in {r['total_s']:.2f} s "
                      f"(202 in {r['accepted_s']:.2f} s, recorded {r['recorded_s']:.2f} s, "
                      f"server CPU {r['cpu_s'] or 0:.2f} s); "
                      f"{r['deleted']} in {r['delete_s']:.2f} s "
                      f"(recorded {r['delete_recorded_s']:.2f} s, "
                      f"server CPU {r['delete_cpu_s'] or 0:.2f} s)", flush=True)
            else:
                print(f"{name}: {n}+{n} on {hosts} hosts: {r['status']} in "
                      f"{r['total_s']:.3f} s", flush=True)
        if args.repeat > 1:
            totals = [r["total_s"] for r in runs]
            print(f"{name}: best {min(totals):.3f} s, median {statistics.median(totals):.3f} s")


if __name__ == "__main__":
    main()
