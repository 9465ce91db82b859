"""What a look at a list costs a project with deleted operations behind it.

A fresh ``fleetflow serve`` (embedded, 200 hosts, 0 s boots); the project makes and
deletes ``--deleted`` reservations of ``--n`` instances each (``--kind vcluster``:
clusters of ``--n`` servers and ``--n`` volumes shaped as bench/vcluster.py's), one
after another, then GETs the list ``--gets`` times (the look clients poll while one
builds). Prints the server's CPU a GET (serve alone, from /proc: ms).

    python bench/history.py --deleted 0 10 --n 1000 --gets 200
    python bench/history.py --kind vcluster --deleted 0 1 5 --n 100 --gets 200
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import requests  # noqa: E402
import reservation  # noqa: E402
import vcluster  # noqa: E402


def own_cpu(pid: int) -> float:
    """User + system CPU of ``pid`` alone, in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_and_delete(kind: str, url: str, pid: int, n: int, workdir: str) -> None:
    if kind == "reservation":
        run = reservation.reserve_measured(url, [pid], n, "m1.tiny", 0.1, workdir)
        reservation.delete_measured(url, [pid], run, 0.1)
        return
    answer = requests.post(f"{url}/v2/bench/vclusters", headers=vcluster.TENANT,
                           json=vcluster.cluster_body(n), timeout=300)
    answer.raise_for_status()
    vcluster_id = answer.json()["vcluster"]["id"]
    vcluster.wait_for(url, vcluster_id, 0.1, vcluster.SETTLED)
    requests.delete(f"{url}/v2/bench/vclusters/{vcluster_id}", headers=vcluster.TENANT,
                    timeout=300).raise_for_status()
    vcluster.wait_for(url, vcluster_id, 0.1, ("DELETED",))


def cpu_a_get(kind: str, deleted: int, n: int, gets: int) -> float:
    """ms of serve's CPU a GET of the list, after ``deleted`` operations of ``n``."""
    with tempfile.TemporaryDirectory(prefix="ff-bench-history-") as workdir:
        proc, url = reservation.start_server(workdir, 200,
                                             {"FLEETFLOW_COMPUTE_BOOT_SECONDS": "0"})
        try:
            for _ in range(deleted):
                make_and_delete(kind, url, proc.pid, n, workdir)
            reservation.quiet([proc.pid])
            before = own_cpu(proc.pid)
            for _ in range(gets):
                requests.get(f"{url}/v2/bench/{kind}s", headers=reservation.HEADERS,
                             timeout=30).raise_for_status()
            return (own_cpu(proc.pid) - before) / gets * 1000
        finally:
            proc.terminate()
            proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=("reservation", "vcluster"), default="reservation")
    parser.add_argument("--deleted", type=int, nargs="+", default=[0, 10])
    parser.add_argument("--n", type=int, default=1000,
                        help="instances a reservation, servers (and volumes) a cluster")
    parser.add_argument("--gets", type=int, default=200)
    args = parser.parse_args()
    for deleted in args.deleted:
        started = time.monotonic()
        ms = cpu_a_get(args.kind, deleted, args.n, args.gets)
        print(f"{deleted:>4} deleted {args.kind}s of {args.n}: {ms:.2f} ms of serve CPU a "
              f"GET of the list ({time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
