"""Automatic recovery of a dead host: from its death to all its servers ACTIVE elsewhere.

Starts a fresh ``fleetflow serve`` (embedded: SQLite, in-process conductors
and their recovery monitor, simulated hosts in its agent processes) on a
generated fleet, with ``[recovery] enabled``, and drives only its REST API:

1. every host but one goes into ``maintenance``, so one reservation of N
   servers lands on that one; then they come back ``up``;
2. that host dies (``POST /v2/admin/hosts/{name}/simulate``), nothing else:
   no operator fences or evacuates it;
3. the host's recovery is polled until it ends.

It prints, from the recovery's timeline (the server's clock, the same as this
process's), the **detection** share (death -> fenced: the heartbeat going
stale after ``service_down_time``, then ``confirm_seconds`` of failed pings),
the **move** share (the evacuation's start -> every server ACTIVE elsewhere,
its end), and the total; the target for detection is
``service_down_time + confirm_seconds + 1 s``.

    python bench/recovery.py                       # 40 servers, 10 s, 5 s
    python bench/recovery.py --servers 40 --service-down-time 10 --confirm 5 --repeat 3
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import requests  # noqa: E402
from evacuate import ADMIN, fill, host_names  # noqa: E402  (the same set-up)
from reservation import start_server  # noqa: E402

OPEN = ("SUSPECT", "DEAD", "HELD", "FENCED", "EVACUATING")


def _at(text: str) -> float:
    """A timeline time (UTC, ISO 8601, naive) as a Unix timestamp."""
    return datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC).timestamp()


def recovery_of(url: str, host: str) -> dict | None:
    page = requests.get(f"{url}/v2/admin/recoveries", headers=ADMIN, params={"host": host},
                        timeout=60).json()
    if not page["recoveries"]:
        return None
    recovery_id = page["recoveries"][0]["id"]
    return requests.get(f"{url}/v2/admin/recoveries/{recovery_id}", headers=ADMIN,
                        timeout=60).json()["recovery"]


def run_case(args) -> dict:
    env = {"FLEETFLOW_RECOVERY_ENABLED": "true",
           "FLEETFLOW_RECOVERY_INTERVAL": str(args.interval),
           "FLEETFLOW_RECOVERY_CONFIRM_SECONDS": str(args.confirm),
           "FLEETFLOW_COMPUTE_SERVICE_DOWN_TIME": str(args.service_down_time),
           "FLEETFLOW_COMPUTE_HEARTBEAT_INTERVAL": str(args.heartbeat_interval)}
    with tempfile.TemporaryDirectory(prefix="ff-bench-recovery-") as workdir:
        proc, url = start_server(workdir, args.hosts, env, hosts_per_rack=args.hosts_per_rack)
        try:
            names = host_names(url)
            victim = names[0]
            fill(url, [victim], names[1:], args.servers)
            # Every host heartbeats again (the ones set up again included).
            time.sleep(args.heartbeat_interval * 1.5)
            died = time.time()
            requests.post(f"{url}/v2/admin/hosts/{victim}/simulate", headers=ADMIN, timeout=60,
                          json={"simulate": {"dead": True}}).raise_for_status()
            deadline = time.monotonic() + args.service_down_time + args.confirm + 300
            while True:
                recovery = recovery_of(url, victim)
                if recovery is not None and recovery["status"] not in OPEN:
                    break
                if time.monotonic() > deadline:
                    sys.exit(f"no recovery of {victim} in time: {recovery}")
                time.sleep(args.poll)
            seen = time.time()
            events = {e["event"]: _at(e["at"]) for e in recovery["timeline"]}
            evacuation = requests.get(
                f"{url}/v2/admin/evacuations/{recovery['evacuation_id']}", headers=ADMIN,
                timeout=60).json()["evacuation"]
            started = _at(evacuation["created_at"])
            ended = _at(evacuation["updated_at"])
            active = sum(1 for s in evacuation["instances"] if s["status"] == "DONE")
            return {"status": recovery["status"], "moved": active,
                    "suspect": events["suspect"] - died, "dead": events["dead"] - died,
                    "detection": events["fenced"] - died, "move": ended - started,
                    "total": ended - died, "seen": seen - died}
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except Exception:  # noqa: BLE001
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=40)
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--hosts-per-rack", type=int, default=16)
    parser.add_argument("--service-down-time", type=int, default=10)
    parser.add_argument("--confirm", type=float, default=5.0)
    parser.add_argument("--heartbeat-interval", type=float, default=2.0)
    parser.add_argument("--interval", type=float, default=0.5,
                        help="[recovery] interval: seconds between the monitor's passes")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--poll", type=float, default=0.1)
    args = parser.parse_args()
    target = args.service_down_time + args.confirm + 1
    print(f"{args.servers} servers on 1 of {args.hosts} hosts; service_down_time "
          f"{args.service_down_time} s, confirm_seconds {args.confirm} s, heartbeat "
          f"{args.heartbeat_interval} s, monitor pass {args.interval} s; load "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'status':>7} {'moved':>6} {'suspect s':>10} {'dead s':>7} {'detection s':>12} "
          f"{'move s':>7} {'total s':>8}  detection target {target:.0f} s")
    for _ in range(args.repeat):
        r = run_case(args)
        print(f"{r['status']:>7} {r['moved']:>6} {r['suspect']:>10.2f} {r['dead']:>7.2f} "
              f"{r['detection']:>12.2f} {r['move']:>7.2f} {r['total']:>8.2f}  "
              f"{'ok' if r['detection'] <= target else 'OVER'}; load "
              f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
