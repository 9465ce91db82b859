"""The floor: the unavoidable work of one instance, one move, one cluster member,
next to what the whole operation costs through ``fleetflow serve``.

For each operation it times, in this process (parts: bench/floor_parts.py):

- reservation, per instance: one scheduler decision from the snapshot (the
  placement of N, divided by N); its share of one claim transaction of N
  consumers (``claim_many``); its share of one ``build_instances`` RPC round trip
  to an agent process over ``fleetflow-ipc`` carrying 100 builds, with the agent's
  one durable write of them (builds in their batched form, as the agents take them
  at their cheapest; a reservation's batches are smaller); the checkpoints
  of its atoms as the fleetflow engine stores them, in batches: its share of its
  group's one task (RUNNING then SUCCESS with every member's host) in a
  reservation of more than 100 instances, else its three (retry, claim, boot);
- evacuation, per move (a rebuild off dead hosts): the move scheduler's decision;
  its share of the fast path's one claim transaction (the server takes its
  destination, its migration the source); the ``start_move`` (and ``get_move``
  until it ends) and ``confirm_move`` round trips; the checkpoints of its five
  atoms;
- virtual cluster, per member (N servers and N volumes, shaped as
  bench/vcluster.py's): the joint placement; its share of one claim
  transaction; a server's share of a 100-build ``build_instances``, a volume's
  ``create_volume``, and
  half an ``attach_volume``; its share of its group's one task in a run of more
  than 100 members, else the checkpoints of its two atoms (retry, boot or create).

Then it runs the operation end to end through a fresh ``fleetflow serve``
(bench/reservation.py, bench/evacuate.py, bench/vcluster.py) and prints its CPU
(serve and its agents) per member, and the ratio end-to-end / floor. CPU is
the figure: wall-clock moves with the machine's load. A reservation and a
vcluster are then deleted and run once more on the same serve: the floor's
parts are medians of runs in one process, past their first run's imports and
SQL statement compilations, and the second operation is the same past them
(a serve's first request pays them once in its life). Both are printed, each
with its median ratio; the evacuation runs once (its servers' reservations
come before it on the same serve).

    python bench/floor.py --n 1000 --repeat 3
    python bench/floor.py --only reservation --n 1000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evacuate  # noqa: E402
import floor_parts  # noqa: E402
import reservation  # noqa: E402
import vcluster  # noqa: E402

OPERATIONS = ("reservation", "evacuation", "vcluster")
# The end-to-end runs: the first operation on a fresh serve, then the same again on it.
LABELS = ("first on a fresh serve", "again on that serve")


def floor_of(operation: str, n: int, repeat: int, hosts: int) -> dict:
    """{part: (CPU ms, wall ms)} per member, the median of ``repeat`` runs of each part."""
    with tempfile.TemporaryDirectory(prefix="ff-floor-") as workdir:
        cloud = floor_parts.Cloud(workdir, hosts)
        try:
            runs = [getattr(floor_parts, operation)(cloud, n) for _ in range(repeat)]
        finally:
            cloud.close()
    return {part: (statistics.median(r[part][0] for r in runs),
                   statistics.median(r[part][1] for r in runs)) for part in runs[0]}


def end_to_end(operation: str, n: int, hosts: int) -> list[tuple[float, float, str]]:
    """[(CPU ms, wall ms) per member through ``fleetflow serve``, and how it ended]: the
    first operation on a fresh serve, then (reservation, vcluster) the same once more
    on it."""
    if operation == "reservation":
        r = reservation.run_one(n, hosts, {"FLEETFLOW_COMPUTE_BOOT_SECONDS": "0"}, "m1.tiny",
                                poll=0.1, again=1)
        members = n
    elif operation == "evacuation":
        sources = -(-n // floor_parts.SERVERS_PER_SOURCE)
        r = evacuate.run_case("rebuild", n, hosts, sources, 10, {},
                              floor_parts.EVACUATION_LANES, poll=0.1)
        members = n
    else:
        r = vcluster.run_api(n, hosts, poll=0.1, again=True)
        members = 2 * n
    return [(1000 * run["cpu_s"] / members, 1000 * run["total_s"] / members, run["status"])
            for run in (r, r.get("again")) if run]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000,
                        help="instances of the reservation, servers of the evacuation")
    parser.add_argument("--vcluster-n", type=int, default=100,
                        help="servers (and as many volumes) of the virtual cluster")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each floor part and of each end-to-end operation")
    parser.add_argument("--only", nargs="+", choices=OPERATIONS, default=list(OPERATIONS))
    parser.add_argument("--floor-only", action="store_true",
                        help="the floor without the end-to-end runs")
    args = parser.parse_args()
    # name: (members per run, hosts of the fleet, members' noun)
    shapes = {"reservation": (args.n, 200, "instance"),
              "evacuation": (args.n, max(100, 10 * -(-args.n // 100)), "move"),
              "vcluster": (args.vcluster_n, 200, "member")}
    for operation in args.only:
        n, hosts, noun = shapes[operation]
        parts = floor_of(operation, n, args.repeat, hosts)
        cpu = sum(c for c, _ in parts.values())
        wall = sum(w for _, w in parts.values())
        print(f"{operation}: N = {n} on {hosts} hosts, the floor per {noun} "
              f"(median of {args.repeat}):")
        for part, (c, w) in parts.items():
            print(f"  {part:<28} {c:8.3f} ms CPU {w:8.3f} ms wall")
        print(f"  {'floor':<28} {cpu:8.3f} ms CPU {wall:8.3f} ms wall")
        if args.floor_only:
            continue
        runs = [end_to_end(operation, n, hosts) for _ in range(args.repeat)]
        for run in runs:
            for label, (e2e_cpu, e2e_wall, status) in zip(LABELS, run, strict=False):
                print(f"  {label:<28} {e2e_cpu:8.3f} ms CPU {e2e_wall:8.3f} ms wall  "
                      f"{status}  ratio {e2e_cpu / cpu:5.2f}x CPU")
        for label, which in zip(LABELS, (0, 1), strict=True):
            if all(len(run) > which for run in runs):
                median = statistics.median(run[which][0] for run in runs)
                print(f"  {'ratio, ' + label.split(' (')[0]:<28} {median / cpu:8.2f}x CPU "
                      "(median)", flush=True)


if __name__ == "__main__":
    main()
