"""A conductor's look at the embedded (SQL) jobboard, as it looks while idle and per job.

For each count of posted jobs: a fresh SQLite database and board with that many
jobs, then ``--repeat`` looks at the board as a conductor's loop makes them (the
listing, then each job's state), after one unmeasured look; prints the median
CPU of this thread per look, and per read of one job's row (what keep-alives
and each job's state read).

    python bench/jobboard.py --jobs 1 20 --repeat 200
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import thread_cpu

from fleetflow.engine.jobboard.sql import SqlJobBoard
from fleetflow.persistence.db import Database


def median_us(fn, repeat: int) -> float:
    return 1e6 * statistics.median(thread_cpu.runs(fn, repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"{'jobs':>5} {'look us CPU':>12} {'job row us CPU':>15}")
    for count in args.jobs:
        look, row = measure(count, args.repeat)
        print(f"{count:>5} {look:>12.0f} {row:>15.0f}", flush=True)


def measure(count: int, repeat: int) -> tuple[float, float]:
    """(us per look at a board of ``count`` jobs, us per read of one job's row)."""
    with tempfile.TemporaryDirectory(prefix="ff-board-") as workdir:
        database = Database(f"sqlite:///{workdir}/fleetflow.db")
        database.upgrade()
        board = SqlJobBoard("bench", {}, database)
        board.connect()
        first = [board.post(f"flow-{i}", details={"flow_uuid": f"flow-{i}"})
                 for i in range(count)][0]
        look = median_us(lambda: list(board.iterjobs(only_unclaimed=True)), repeat)
        row = median_us(lambda: board._row(first.uuid), repeat)
        database.dispose()
    return look, row


if __name__ == "__main__":
    main()
