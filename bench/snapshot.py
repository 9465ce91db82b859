"""The scheduler's view of the cloud read from the database, as every schedule reads it.

For each fleet size: a generated fleet loaded into a fresh SQLite file, then
``snapshot_from_db`` (with placement's usages and the recent build failures, in
one transaction, as a reservation's schedule reads them) run ``--repeat`` times
after one unmeasured run; prints the median and best CPU of this thread.

    python bench/snapshot.py --hosts 200 2000 --repeat 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile

import thread_cpu

from fleetflow.common import config
from fleetflow.persistence import fleet
from fleetflow.persistence.db import get_database
from fleetflow.persistence.placement.store import PlacementStore
from fleetflow.scheduler.plan import recent_failures
from fleetflow.scheduler.snapshot import snapshot_from_db


def measure(hosts: int, repeat: int) -> list[float]:
    """CPU ms of each read of the snapshot of a generated fleet of ``hosts``."""
    with tempfile.TemporaryDirectory(prefix="ff-snapshot-") as workdir:
        fleet_file = os.path.join(workdir, "fleet.yaml")
        subprocess.run(["fleetflow", "fleet", "generate", "--hosts", str(hosts), "-o",
                        fleet_file], check=True, capture_output=True)
        conf = config.load(environ=dict(
            os.environ, FLEETFLOW_STATE_DIR=workdir, FLEETFLOW_FLEET_FILE=fleet_file,
            FLEETFLOW_DATABASE_CONNECTION=f"sqlite:///{workdir}/fleetflow.db"))
        database = get_database(conf)
        database.upgrade()
        with database.session() as session:
            fleet.load(session, fleet.expand(fleet.read(fleet_file)))
        placement = PlacementStore(database)

        def read():
            usage = placement.usages_by_provider()
            with database.session() as session:
                return snapshot_from_db(session, usage, recent_failures(session))
        assert len(read()) == hosts
        times = [1000 * seconds for seconds in thread_cpu.runs(read, repeat)]
        database.dispose()
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(f"{'hosts':>6} {'median ms CPU':>14} {'best ms CPU':>12}")
    for hosts in args.hosts:
        times = measure(hosts, args.repeat)
        print(f"{hosts:>6} {statistics.median(times):>14.2f} {min(times):>12.2f}", flush=True)


if __name__ == "__main__":
    main()
