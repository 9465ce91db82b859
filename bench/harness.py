"""What the Nova harness costs by itself: CPU while idle, and a build-and-delete cycle.

The openstack test layer shares its machine with the harness for its whole run, so the
harness's idle CPU (its services' polling and pool threads) is time taken from every test.
One run starts one harness of ``--hosts`` computes (``python -m
fleetflow.testing.openstack_cloud``), warms it (``--count`` servers built in one
multi-create, then deleted: every RPC server's pool spun up as the tests leave it), then
prints, ``--rounds`` times:

- ``idle``: the harness process's CPU (user + system) over ``--idle`` seconds with no
  request, as a share of one core;
- ``cycle``: the wall-clock time and the harness's CPU for ``--count`` servers booted in
  one multi-create until every one is ACTIVE, then deleted until Nova lists none.

    python bench/harness.py --hosts 10 --count 20 --idle 20 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from openstack import Nova, start_harness, stop, wait  # noqa: E402  (bench/openstack.py)
from reservation import cpu_seconds  # noqa: E402  (bench/reservation.py)


def cycle(nova: Nova, pid: int, count: int, flavor: str) -> tuple[float, float]:
    started, cpu = time.monotonic(), cpu_seconds(pid)
    nova.boot(count, flavor)
    nova.wait_active(count, poll=0.25, timeout=600)
    for server in nova.servers():
        nova.call("DELETE", f"/servers/{server['id']}")
    wait(lambda: not nova.servers(), 600, "servers deleted")
    return time.monotonic() - started, cpu_seconds(pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="harness-bench-")
    proc, compute_url, _ = start_harness(workdir, args.hosts)
    try:
        nova = Nova(compute_url)
        flavor = nova.flavor_id("m1.tiny")
        cycle(nova, proc.pid, args.count, flavor)
        for _ in range(args.rounds):
            cpu = cpu_seconds(proc.pid)
            time.sleep(args.idle)
            idle = (cpu_seconds(proc.pid) - cpu) / args.idle
            took, used = cycle(nova, proc.pid, args.count, flavor)
            print(f"idle {idle:.0%} of a core   cycle of {args.count}: {took:.1f} s, "
                  f"{used:.1f} s CPU", flush=True)
    finally:
        stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
