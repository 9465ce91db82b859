"""Time from POST /v2/admin/evacuations to every server DONE, through ``fleetflow serve``.

Each case starts a fresh ``fleetflow serve`` (embedded: SQLite, in-process
conductors, simulated hosts in its agent processes) on a generated fleet in a
temporary directory, and drives only its REST API:

1. every host but the sources goes into ``maintenance``, so one reservation
   of N servers lands on the sources; then they come back ``up``;
2. for ``rebuild`` the sources die (``POST /v2/admin/hosts/{name}/simulate``)
   and are set ``down``;
3. the evacuation is posted and its list entry polled until it settles.

It prints the time from the POST to the poll that saw it settled, the time the
server recorded the end (the evacuation's ``updated_at``), the CPU seconds the
server and its agent processes used meanwhile, and the progress.

    python bench/evacuate.py                      # the recorded cases (see RESULTS.md)
    python bench/evacuate.py --case live-2s
    python bench/evacuate.py --mode cold --servers 40 --hosts 10 --sources 1
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reservation import cpu_seconds, start_server  # noqa: E402  (the same start-up)

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
TENANT = {"X-Project-Id": "bench", "X-Roles": "member"}
SETTLED = ("DONE", "PARTIAL", "FAILED", "REVERTED", "PAUSED")

LIVE_2S = {"FLEETFLOW_COMPUTE_LIVE_MIGRATE_SECONDS": "2",
           "FLEETFLOW_COMPUTE_MAX_CONCURRENT_OUTGOING_MIGRATIONS": "4",
           "FLEETFLOW_COMPUTE_MAX_CONCURRENT_INCOMING_MIGRATIONS": "4"}
# name: (mode, servers, hosts, sources, hosts per rack, env, max_parallel)
CASES = {
    "rebuild-40": ("rebuild", 40, 10, 1, 16, {}, 8),
    "live-40": ("live", 40, 10, 1, 16, {}, 8),
    "cold-40": ("cold", 40, 10, 1, 16, {}, 8),
    "rebuild-rack-1000": ("rebuild", 1000, 100, 10, 10, {}, 64),
    "live-2s": ("live", 40, 10, 1, 16, LIVE_2S, 8),
}


def host_names(url: str) -> list[str]:
    page = requests.get(f"{url}/v2/admin/hosts", headers=ADMIN, timeout=60).json()
    return sorted(h["name"] for h in page["hosts"])


def set_state(url: str, host: str, state: str) -> None:
    answer = requests.put(f"{url}/v2/admin/hosts/{host}", headers=ADMIN, timeout=60,
                          json={"host": {"state": state, "reason": "bench"}})
    answer.raise_for_status()


def fill(url: str, sources: list[str], others: list[str], servers: int) -> None:
    """N servers on the sources only: everything else in maintenance meanwhile."""
    for host in others:
        set_state(url, host, "maintenance")
    answer = requests.post(f"{url}/v2/bench/reservations", headers=TENANT, timeout=300, json={
        "reservation": {"name": "evacuees", "count": servers, "flavor_ref": "m1.tiny",
                        "image_ref": "cirros"}})
    answer.raise_for_status()
    location = answer.headers["Location"]
    while True:
        status = requests.get(location, headers=TENANT, timeout=60).json()["reservation"][
            "status"]
        if status not in ("PENDING", "SCHEDULING", "BUILDING"):
            break
        time.sleep(0.1)
    if status != "ACTIVE":
        sys.exit(f"the servers to evacuate did not build: {status}")
    for host in others:
        set_state(url, host, "up")


def kill(url: str, sources: list[str]) -> None:
    for host in sources:
        requests.post(f"{url}/v2/admin/hosts/{host}/simulate", headers=ADMIN, timeout=60,
                      json={"simulate": {"dead": True}}).raise_for_status()
        set_state(url, host, "down")


def listed(url: str, evacuation_id: str) -> dict:
    page = requests.get(f"{url}/v2/admin/evacuations", headers=ADMIN, timeout=60).json()
    return next(e for e in page["evacuations"] if e["id"] == evacuation_id)


def run_case(mode, servers, hosts, sources, per_rack, env, max_parallel, poll) -> dict:
    with tempfile.TemporaryDirectory(prefix="ff-bench-evac-") as workdir:
        proc, url = start_server(workdir, hosts, env, hosts_per_rack=per_rack)
        try:
            names = host_names(url)
            chosen = names[:sources]
            fill(url, chosen, names[sources:], servers)
            if mode == "rebuild":
                kill(url, chosen)
            cpu0 = cpu_seconds(proc.pid)
            t0, wall0 = time.monotonic(), time.time()
            answer = requests.post(f"{url}/v2/admin/evacuations", headers=ADMIN, timeout=300,
                                   json={"evacuation": {"hosts": chosen, "mode": mode,
                                                        "max_parallel": max_parallel,
                                                        "on_error": "pause"}})
            answer.raise_for_status()
            accepted = time.monotonic() - t0
            evacuation_id = answer.json()["evacuation"]["id"]
            while True:
                entry = listed(url, evacuation_id)
                if entry["status"] in SETTLED:
                    break
                time.sleep(poll)
            total = time.monotonic() - t0
            cpu = cpu_seconds(proc.pid)
            updated = datetime.datetime.fromisoformat(entry["updated_at"]).replace(
                tzinfo=datetime.UTC).timestamp()
            return {"status": entry["status"], "progress": entry["progress"],
                    "accepted_s": accepted, "total_s": total, "recorded_s": updated - wall0,
                    "cpu_s": None if cpu0 is None or cpu is None else cpu - cpu0}
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except Exception:  # noqa: BLE001
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", nargs="+", choices=sorted(CASES),
                        help="recorded cases to run (default: all, unless --mode is given)")
    parser.add_argument("--mode", choices=("rebuild", "live", "cold", "drain"))
    parser.add_argument("--servers", type=int, default=40)
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--sources", type=int, default=1)
    parser.add_argument("--hosts-per-rack", type=int, default=16)
    parser.add_argument("--max-parallel", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--poll", type=float, default=0.05)
    args = parser.parse_args()
    if args.mode:
        cases = {"custom": (args.mode, args.servers, args.hosts, args.sources,
                            args.hosts_per_rack, {}, args.max_parallel)}
    else:
        cases = {name: CASES[name] for name in (args.case or CASES)}
    print(f"{'case':>18} {'mode':>8} {'servers':>8} {'hosts':>6} {'status':>8} "
          f"{'202 in s':>9} {'DONE in s':>10} {'recorded s':>11} {'server CPU s':>13}")
    for name, case in cases.items():
        for _ in range(args.repeat):
            r = run_case(*case, poll=args.poll)
            cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}"
            print(f"{name:>18} {case[0]:>8} {case[1]:>8} {case[2]:>6} {r['status']:>8} "
                  f"{r['accepted_s']:>9.2f} {r['total_s']:>10.2f} {r['recorded_s']:>11.2f} "
                  f"{cpu:>13}", flush=True)
            if r["status"] != "DONE":
                print(f"       progress: {r['progress']}")


if __name__ == "__main__":
    main()
