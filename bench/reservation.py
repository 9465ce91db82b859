"""Time from POST /reservations to every instance ACTIVE, through ``fleetflow serve``.

Each run starts a fresh ``fleetflow serve`` (embedded: SQLite, in-process
conductors, simulated hosts in its agent processes) on a generated fleet in a temporary
directory, posts one reservation over HTTP and polls it until it settles.
It prints:

- "ACTIVE in s": from the POST to the poll that saw it settled;
- "recorded s": from the POST to the moment the server recorded it settled
  (the reservation's ``updated_at``, written by the flow's last task when the
  last instance is ACTIVE): the same end without the poll's delay;
- the CPU seconds the server process and its agent processes used meanwhile
  (Linux: from /proc);
- when the first and the last build reached their hosts (from the simulated
  hosts' state file): the run is that last arrival, the boot time, then the
  completions' tail.

Polls go to the list route (each reservation's status and progress, no
instances: about 5 ms of the server's CPU with 1,000 instances, against 12 ms
for the whole reservation); ``--poll`` sets the interval (default 0.1 s, ten
times the resolution of ``fleetflow reserve --watch``'s 1 s).

    python bench/reservation.py --n 100 1000 5000 --hosts 200
    python bench/reservation.py --n 1000 --hosts 100 --boot-seconds 2 --builds-per-host 10
    python bench/reservation.py --n 1000 --hosts 2000 --idle 20   # then 20 s idle
    python bench/reservation.py --n 10000 --hosts 2000 --memory   # peak RSS of each process
    python bench/reservation.py --n 1 1000 --again 3 --cpuacct    # 3 more on each serve, CPU in ns
    python bench/reservation.py --n 1000 --again 2 --delete       # and each delete's figures

``--cpuacct`` (root, embedded) reads the CPU from a cpuacct cgroup of serve and its
agents, to the nanosecond, instead of /proc's 10 ms clock ticks.

``--distributed 3`` runs the same request on PostgreSQL, Redis's board and RabbitMQ's RPC
with three ``fleetflow conductor`` processes, the hosts simulated by ``compute-agent``
processes (``cluster.py``); the CPU is then that of every process of the run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

import cluster
import cpuacct
import requests

HEADERS = {"X-Project-Id": "bench", "X-Roles": "member"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_fleet(workdir: str, hosts: int, hosts_per_rack: int = 16) -> str:
    fleet = os.path.join(workdir, "fleet.yaml")
    subprocess.run(["fleetflow", "fleet", "generate", "--hosts", str(hosts),
                    "--hosts-per-rack", str(hosts_per_rack), "-o", fleet],
                   check=True, capture_output=True)
    return fleet


def start_server(workdir: str, hosts: int, env_extra: dict,
                 hosts_per_rack: int = 16) -> tuple[subprocess.Popen, str]:
    fleet = generate_fleet(workdir, hosts, hosts_per_rack)
    port = free_port()
    env = dict(os.environ, FLEETFLOW_API_PORT=str(port), FLEETFLOW_FLEET_FILE=fleet,
               FLEETFLOW_API_MAX_RESERVATION_COUNT="100000", FLEETFLOW_STATE_DIR=workdir,
               FLEETFLOW_DATABASE_CONNECTION=f"sqlite:///{workdir}/fleetflow.db",
               **env_extra)
    log = open(os.path.join(workdir, "serve.log"), "w")  # noqa: SIM115
    proc = subprocess.Popen(["fleetflow", "serve"], cwd=workdir, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            requests.get(f"{url}/openapi.json", timeout=2)
            return proc, url
        except requests.ConnectionError:
            if proc.poll() is not None:
                sys.exit(f"fleetflow serve exited; see {workdir}/serve.log")
            time.sleep(0.2)
    proc.kill()
    sys.exit("fleetflow serve did not start")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of process ``pid`` and its children so far (None without /proc).

    The children are the simulated hosts' agent processes of ``fleetflow serve``.
    """
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            kids = [int(child) for child in children.read().split()]
    except OSError:
        return None
    total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total + sum(cpu_seconds(kid) or 0.0 for kid in kids)


def peak_rss_mb(pid: int) -> list[float]:
    """Peak resident memory (VmHWM) of ``pid`` and of each of its children, in MB."""
    try:
        with open(f"/proc/{pid}/status") as status:
            peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            kids = [int(child) for child in children.read().split()]
    except (OSError, StopIteration):
        return []
    return [peak / 1024] + [mb for kid in kids for mb in peak_rss_mb(kid)]


def build_arrivals(workdir: str, since: float) -> tuple[float, float] | None:
    """Seconds after ``since`` (wall clock) at which the first and last build reached a host."""
    path = os.path.join(workdir, "fleetflow-hosts.db")  # [compute] state_path's default
    if not os.path.exists(path):
        return None
    with sqlite3.connect(path) as conn:
        first, last = conn.execute("SELECT min(created_at), max(created_at) FROM guests").fetchone()
    return None if first is None else (first - since, last - since)


def listed_status(url: str, reservation_id: str) -> str:
    """The reservation's status from the list route (its progress counts, no instances)."""
    page = requests.get(f"{url}/v2/bench/reservations", headers=HEADERS, timeout=120).json()
    return next(r["status"] for r in page["reservations"] if r["id"] == reservation_id)


def settled_at(reservation: dict) -> float:
    """Wall-clock time of the reservation's last change: when it settled (naive UTC)."""
    when = datetime.datetime.fromisoformat(reservation["updated_at"])
    return when.replace(tzinfo=datetime.UTC).timestamp()


# Set by --cpuacct: the embedded serve's and its agents' CPU read from their cpuacct
# group (to the nanosecond) instead of /proc's clock ticks.
CPU_GROUP: cpuacct.Group | None = None


@contextlib.contextmanager
def running(workdir: str, hosts: int, env_extra: dict, conductors: int):
    """Yield ``(url, pids)``: a fresh embedded serve, or a distributed run of ``conductors``."""
    if not conductors:
        proc, url = start_server(workdir, hosts, env_extra)
        try:
            if CPU_GROUP is not None:
                with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as children:
                    agents = [int(child) for child in children.read().split()]
                for pid in [proc.pid, *agents]:
                    CPU_GROUP.add(pid)
            yield url, [proc.pid]
        finally:
            cluster.stop([proc])
        return
    fleet = generate_fleet(workdir, hosts)
    with cluster.distributed(workdir, fleet, free_port(), conductors,
                             dict(env_extra, FLEETFLOW_API_MAX_RESERVATION_COUNT="100000")
                             ) as (_serve, url, procs):
        yield url, [proc.pid for proc in procs]


def total_cpu(pids: list[int]) -> float | None:
    if CPU_GROUP is not None:
        return CPU_GROUP.seconds()
    seconds = [cpu_seconds(pid) for pid in pids]
    return None if None in seconds else sum(seconds)


def run_one(n: int, hosts: int, env_extra: dict, flavor: str, poll: float,
            conductors: int = 0, idle: float = 0.0, again: int = 0,
            delete: bool = False) -> dict:
    """One reservation of ``n`` on a fresh cloud. ``again``: then it is deleted and the
    same reservation measured that many times more on the same server, whose imports
    and statement caches the first one warmed (``"repeats"``: their figures,
    ``"again"``: the first of them). ``delete``: the last one is deleted too.
    ``"deletes"``: each delete's figures, from the DELETE to the list's DELETED."""
    with tempfile.TemporaryDirectory(prefix="ff-bench-") as workdir, \
            running(workdir, hosts, env_extra, conductors) as (url, pids):
        first = reserve_measured(url, pids, n, flavor, poll, workdir)
        result = {"peak_mb": [peak_rss_mb(pid) for pid in pids], "batches": build_batches(url),
                  "n": n, "hosts": hosts, **first,
                  "idle_cpu_s": idle and idle_cpu(pids, idle)}
        runs, deletes, last = [], [], first
        for _ in range(int(again)):
            deletes.append(delete_measured(url, pids, last, poll))
            last = reserve_measured(url, pids, n, flavor, poll, workdir)
            runs.append(last)
        if delete:
            deletes.append(delete_measured(url, pids, last, poll))
        if runs:
            result["again"] = runs[0]
        result["repeats"], result["deletes"] = runs, deletes
        return result


def delete_measured(url: str, pids: list[int], run: dict, poll: float) -> dict:
    """DELETE the reservation of ``run`` and poll the list until it is DELETED; the
    time and CPU to then, and back to quiet for the next run."""
    cpu0, t0 = total_cpu(pids), time.monotonic()
    requests.delete(run["location"], headers=HEADERS, timeout=120).raise_for_status()
    while listed_status(url, run["id"]) != "DELETED":
        time.sleep(poll)
    total, cpu1 = time.monotonic() - t0, total_cpu(pids)
    quiet(pids)
    return {"total_s": total, "cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0}


def quiet(pids: list[int], limit: float = 30.0) -> None:
    """Return once the processes use less than a tenth of a core over 0.2 s: the
    delete's flow may still be ending its job after the status reads DELETED."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = total_cpu(pids)
        time.sleep(0.2)
        after = total_cpu(pids)
        if before is None or after is None or after - before < 0.02:
            return


def reserve_measured(url: str, pids: list[int], n: int, flavor: str, poll: float,
              workdir: str) -> dict:
    cpu0 = total_cpu(pids)
    t0 = time.monotonic()
    wall0 = time.time()
    answer = requests.post(f"{url}/v2/bench/reservations", headers=HEADERS, json={
        "reservation": {"name": f"bench-{n}", "count": n, "flavor_ref": flavor,
                        "image_ref": "cirros"}}, timeout=120)
    answer.raise_for_status()
    accepted = time.monotonic() - t0
    location = answer.headers["Location"]
    reservation_id = answer.json()["reservation"]["id"]
    while True:
        status = listed_status(url, reservation_id)
        if status not in ("PENDING", "SCHEDULING", "BUILDING", "REVERTING"):
            break
        time.sleep(poll)
    total = time.monotonic() - t0
    cpu1 = total_cpu(pids)
    body = requests.get(location, headers=HEADERS, timeout=120).json()["reservation"]
    return {"id": reservation_id, "location": location, "status": status,
            "accepted_s": accepted, "total_s": total, "progress": body["progress"],
            "settled_s": settled_at(body) - wall0,
            "cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
            "arrivals": build_arrivals(workdir, wall0)}


def build_batches(url: str) -> tuple[float, float] | None:
    """(batches, builds they carried) from the server's metrics (the embedded serve's
    conductors; a distributed run's conductors serve theirs elsewhere)."""
    text = requests.get(f"{url}/metrics", timeout=30).text
    found = dict(re.findall(r"^fleetflow_(build_batches|batched_builds)_total (\S+)$", text,
                            re.MULTILINE))
    if len(found) != 2:
        return None
    return float(found["build_batches"]), float(found["batched_builds"])


def idle_cpu(pids: list[int], seconds: float) -> float | None:
    """CPU the processes use over ``seconds`` with no request (after 2 s to let the run end)."""
    time.sleep(2.0)
    before = total_cpu(pids)
    time.sleep(seconds)
    after = total_cpu(pids)
    return None if before is None or after is None else after - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[100])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--boot-seconds", type=float, default=0.0)
    parser.add_argument("--builds-per-host", type=int, default=10)
    parser.add_argument("--engine", default=None, choices=["fleetflow-parallel", "parallel"],
                        help="[conductor] engine (default: the configuration's, "
                             "fleetflow-parallel)")
    parser.add_argument("--engine-workers", type=int, default=None,
                        help="[conductor] engine_workers (threads per flow)")
    parser.add_argument("--flavor", default="m1.tiny")
    parser.add_argument("--distributed", type=int, default=0, metavar="CONDUCTORS",
                        help="run on PostgreSQL, Redis and RabbitMQ with this many "
                             "conductor processes (default 0: embedded)")
    parser.add_argument("--poll", type=float, default=0.1,
                        help="seconds between GETs of the reservation list")
    parser.add_argument("--memory", action="store_true",
                        help="print each process's peak resident memory (VmHWM) after the run")
    parser.add_argument("--idle", type=float, default=0.0, metavar="SECONDS",
                        help="then measure the CPU of the idle cloud over SECONDS")
    parser.add_argument("--again", type=int, default=0, metavar="K",
                        help="then delete it and run the same reservation K more times on "
                             "the same serve, each on its own line (past the serve's first "
                             "operation)")
    parser.add_argument("--delete", action="store_true",
                        help="then delete the last reservation too (each delete's time and "
                             "CPU are printed)")
    parser.add_argument("--cpuacct", action="store_true",
                        help="read the CPU of serve and its agents from a cpuacct cgroup, to "
                             "the nanosecond (root; embedded only) instead of /proc's 10 ms "
                             "ticks")
    args = parser.parse_args()
    if args.cpuacct:
        if not cpuacct.available() or args.distributed:
            sys.exit("--cpuacct: needs a writable cpuacct cgroup (v1) and an embedded run")
        global CPU_GROUP
        CPU_GROUP = cpuacct.Group("fleetflow-bench")
    env = {"FLEETFLOW_COMPUTE_BOOT_SECONDS": str(args.boot_seconds),
           "FLEETFLOW_COMPUTE_MAX_CONCURRENT_BUILDS": str(args.builds_per_host)}
    if args.engine_workers:
        env["FLEETFLOW_CONDUCTOR_ENGINE_WORKERS"] = str(args.engine_workers)
    if args.engine:
        env["FLEETFLOW_CONDUCTOR_ENGINE"] = args.engine
    print(f"{'N':>6} {'hosts':>6} {'boot s':>6} {'status':>8} {'202 in s':>9} "
          f"{'ACTIVE in s':>12} {'recorded s':>11} {'server CPU s':>13} "
          f"{'builds reach hosts s':>21}")
    try:
        report(args, env)
    finally:
        if CPU_GROUP is not None:
            CPU_GROUP.close()


def report(args, env: dict) -> None:
    digits = 3 if args.cpuacct else 2
    for n in args.n:
        r = run_one(n, args.hosts, env, args.flavor, args.poll, args.distributed, args.idle,
                    again=args.again, delete=args.delete)
        for run in [r, *r["repeats"]]:
            cpu = "-" if run["cpu_s"] is None else f"{run['cpu_s']:.{digits}f}"
            arrivals = ("-" if run["arrivals"] is None
                        else "{:.2f}-{:.2f}".format(*run["arrivals"]))
            print(f"{r['n']:>6} {r['hosts']:>6} {args.boot_seconds:>6} {run['status']:>8} "
                  f"{run['accepted_s']:>9.2f} {run['total_s']:>12.2f} {run['settled_s']:>11.2f} "
                  f"{cpu:>13} {arrivals:>21}{'  (again)' if run is not r else ''}",
                  flush=True)
        for deleted in r["deletes"]:
            cpu = "-" if deleted["cpu_s"] is None else f"{deleted['cpu_s']:.{digits}f}"
            print(f"       deleted: DELETE to DELETED in {deleted['total_s']:.2f} s, "
                  f"server CPU {cpu} s", flush=True)
        if r["status"] != "ACTIVE":
            print(f"       progress: {r['progress']}")
        if r["batches"] and r["batches"][0]:
            print(f"       builds sent in {r['batches'][0]:.0f} batches, "
                  f"{r['batches'][1] / r['batches'][0]:.1f} a batch", flush=True)
        if args.memory and r["peak_mb"]:
            print("       peak RSS MB: " + "; ".join(
                " + ".join(f"{mb:.0f}" for mb in peaks) for peaks in r["peak_mb"])
                + " (each process, then its children)", flush=True)
        if r["idle_cpu_s"] is not None and args.idle:
            print(f"       idle: {r['idle_cpu_s']:.2f} s of CPU over {args.idle:.0f} s "
                  f"({100 * r['idle_cpu_s'] / args.idle:.1f}% of a core)", flush=True)


if __name__ == "__main__":
    main()
