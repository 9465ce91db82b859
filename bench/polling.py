"""What polling a big reservation while it builds costs the build, through ``fleetflow serve``.

Each run starts a fresh ``fleetflow serve`` (bench/reservation.py's start-up) on
a generated fleet, posts one reservation and waits until it settles, either
alone or with ``--pollers`` client threads each asking
``GET .../reservations/{id}?instance_limit=0`` (the reservation and its
progress, no instance) every ``--interval`` seconds, as many clients following
one build would. Runs alternate, without pollers then with them, ``--pairs``
times; the figure is the ratio of each pair.

Per run it prints:

- "ACTIVE s": from the POST to the moment the server recorded the reservation
  settled (its ``updated_at``): the build, without the watcher's delay;
- "CPU s": what the server process and its agent processes used meanwhile
  (Linux: /proc), up to the watcher seeing it settled;
- the pollers' GETs: how many, their median and 90th percentile latency;
- per pair: the ratio of the times and of the CPU, and the CPU one summary GET
  added (the CPU the polled run used over the other's, per GET).

The watcher that sees the end asks the same summary every 0.5 s in both runs.
After the last pair, on the settled reservation, it measures what one GET
costs the server's CPU in three forms: the summary, the full first page of
instances (the default: ``[api] page_size``, 1,000, as a reservation of at most
1,000 instances answers with all of them) and a page of 100.

    python bench/polling.py --n 10000 --hosts 2000 --pairs 3
    python bench/polling.py --n 5000 --hosts 2000 --pairs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
from reservation import HEADERS, cpu_seconds, settled_at, start_server  # noqa: E402

UNSETTLED = ("PENDING", "SCHEDULING", "BUILDING", "REVERTING")
SUMMARY = {"instance_limit": "0"}
WATCH_SECONDS = 0.5
# What a settled build still writes (its flow's last checkpoints) is over by then.
SETTLE_SECONDS = 5.0


class Poller(threading.Thread):
    """One client: GET the summary every ``interval`` seconds until stopped."""

    def __init__(self, url: str, interval: float, stop: threading.Event):
        super().__init__(daemon=True)
        self.url, self.interval, self.stop = url, interval, stop
        self.latencies: list[float] = []
        self.errors = 0

    def run(self) -> None:
        session = requests.Session()
        session.headers.update(HEADERS)
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                session.get(self.url, params=SUMMARY, timeout=60).raise_for_status()
                self.latencies.append(time.monotonic() - started)
            except requests.RequestException:
                self.errors += 1
            self.stop.wait(max(0.0, self.interval - (time.monotonic() - started)))


def build(url: str, n: int, flavor: str, pollers: int, interval: float, pid: int) -> dict:
    """POST a reservation of ``n`` and wait until it settles, ``pollers`` polling it."""
    cpu0 = cpu_seconds(pid)
    wall0 = time.time()
    answer = requests.post(f"{url}/v2/bench/reservations", headers=HEADERS, json={
        "reservation": {"name": f"poll-{n}", "count": n, "flavor_ref": flavor,
                        "image_ref": "cirros"}}, timeout=300)
    answer.raise_for_status()
    location = answer.headers["Location"]
    stop = threading.Event()
    threads = [Poller(location, interval, stop) for _ in range(pollers)]
    for thread in threads:
        thread.start()
    try:
        while True:
            body = requests.get(location, headers=HEADERS, params=SUMMARY,
                                timeout=300).json()["reservation"]
            if body["status"] not in UNSETTLED:
                break
            time.sleep(WATCH_SECONDS)
        cpu1 = cpu_seconds(pid)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    latencies = sorted(s for t in threads for s in t.latencies)
    return {"status": body["status"], "settled_s": settled_at(body) - wall0,
            "cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
            "gets": len(latencies), "errors": sum(t.errors for t in threads),
            "median_ms": 1000 * statistics.median(latencies) if latencies else None,
            "p90_ms": 1000 * latencies[int(0.9 * (len(latencies) - 1))] if latencies else None,
            "location": location}


def get_cpu_ms(pid: int, url: str, params: dict | None, repeat: int) -> tuple[float, float]:
    """``(server CPU ms, wall ms)`` per GET of ``url``, less what the idle server burns
    meanwhile (measured over as long a pause right after)."""
    session = requests.Session()
    session.headers.update(HEADERS)
    session.get(url, params=params, timeout=300).raise_for_status()  # warm
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    for _ in range(repeat):
        session.get(url, params=params, timeout=300).raise_for_status()
    cpu1, elapsed = cpu_seconds(pid), time.monotonic() - t0
    time.sleep(elapsed)
    idle = (cpu_seconds(pid) - cpu1) / (time.monotonic() - t0 - elapsed) * elapsed
    return 1000 * (cpu1 - cpu0 - idle) / repeat, 1000 * elapsed / repeat


def run(n: int, hosts: int, env: dict, flavor: str, pollers: int, interval: float,
        measure_gets: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="ff-bench-poll-") as workdir:
        proc, url = start_server(workdir, hosts, env)
        try:
            result = build(url, n, flavor, pollers, interval, proc.pid)
            if measure_gets:
                time.sleep(SETTLE_SECONDS)
                location = result["location"]
                result["get_ms"] = {
                    "summary (instance_limit=0)": get_cpu_ms(proc.pid, location, SUMMARY,
                                                             measure_gets),
                    "full first page (default: [api] page_size instances)": get_cpu_ms(
                        proc.pid, location, None, max(5, measure_gets // 4)),
                    "a page of 100 (instance_limit=100)": get_cpu_ms(
                        proc.pid, location, {"instance_limit": "100"}, measure_gets)}
            return result
        finally:
            cluster.stop([proc])


def line(label: str, r: dict) -> str:
    cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}"
    gets = "-" if not r["gets"] else (f"{r['gets']:>6} {r['median_ms']:>7.1f} "
                                      f"{r['p90_ms']:>7.1f}")
    return (f"{label:>8} {r['status']:>8} {r['settled_s']:>9.2f} {cpu:>8} {gets:>22}"
            + (f"  ({r['errors']} failed GETs)" if r["errors"] else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--pollers", type=int, default=8)
    parser.add_argument("--interval", type=float, default=0.1,
                        help="seconds between one poller's GETs")
    parser.add_argument("--flavor", default="m1.tiny")
    parser.add_argument("--measure-gets", type=int, default=50,
                        help="GETs of each form timed after the last run (0: none)")
    args = parser.parse_args()
    env = {"FLEETFLOW_COMPUTE_BOOT_SECONDS": "0"}
    print(f"N={args.n} hosts={args.hosts} pollers={args.pollers} every {args.interval} s",
          flush=True)
    print(f"{'run':>8} {'status':>8} {'ACTIVE s':>9} {'CPU s':>8} "
          f"{'GETs':>6} {'med ms':>7} {'p90 ms':>7}", flush=True)
    ratios = []
    for pair in range(args.pairs):
        alone = run(args.n, args.hosts, env, args.flavor, 0, args.interval)
        print(line(f"{pair + 1}: none", alone), flush=True)
        last = pair == args.pairs - 1
        polled = run(args.n, args.hosts, env, args.flavor, args.pollers, args.interval,
                     measure_gets=args.measure_gets if last else 0)
        print(line(f"{pair + 1}: {args.pollers}", polled), flush=True)
        time_ratio = polled["settled_s"] / alone["settled_s"]
        per_get = "-"
        if alone["cpu_s"] is not None and polled["cpu_s"] is not None:
            cpu_ratio = f"{polled['cpu_s'] / alone['cpu_s']:.3f}"
            if polled["gets"]:
                per_get = f"{1000 * (polled['cpu_s'] - alone['cpu_s']) / polled['gets']:.2f}"
        else:
            cpu_ratio = "-"
        ratios.append(time_ratio)
        print(f"   pair {pair + 1}: time ratio {time_ratio:.3f}, CPU ratio {cpu_ratio}, "
              f"CPU ms added per summary GET {per_get}", flush=True)
        if last and "get_ms" in polled:
            for form, (cpu_ms, wall_ms) in polled["get_ms"].items():
                print(f"   one GET, {form}: server CPU {cpu_ms:.2f} ms, wall {wall_ms:.2f} ms",
                      flush=True)
    print(f"time ratios: {', '.join(f'{r:.3f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.3f}", flush=True)


if __name__ == "__main__":
    main()
