"""A reservation's instance rows written next to a thread that runs Python.

Python's sqlite3 lets go of the interpreter lock around each step of SQLite (each
row an ``executemany`` writes), and ``uuid.uuid4()`` around each read of the
system's randomness; each time, the writer takes the lock back only when the
other thread lets go of it, up to a switch interval later. This times, in one
process on a fresh SQLite file, the rows of one reservation of N instances
(their ids made and their insert, their first tries, their ACTIVE writes by
groups of 100) with 0 and then 1 thread spinning in Python beside it, with the
switch interval ``fleetflow serve`` sets (20 ms).

    python bench/busy_neighbour.py --n 1000 5000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time

from fleetflow.common import ids
from fleetflow.persistence import db as dbmod
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Reservation

SWITCH_INTERVAL_S = 0.02


def write_all(database, n: int) -> tuple[float, float]:
    """(CPU ms of this thread, wall ms) to write one reservation's rows."""
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    with database.session() as session:
        reservation = Reservation(id=ids.new_reservation_id(), tenant_id="bench",
                                  user_id="bench", name="bench", status="PENDING",
                                  policy="all", request={})
        session.add(reservation)
        session.flush()
        rows.create_instances(session, reservation, n, "m1.tiny", "cirros", None)
        uuids = rows.instance_ids(session, reservation.id)
    with database.session() as session:
        rows.record_first_attempts(session, {u: f"host-{k % 200:04d}"
                                             for k, u in enumerate(uuids)},
                                   status="BUILDING", task_state="spawning")
    for start in range(0, n, 100):
        with database.session() as session:
            rows.update_instances(session, uuids[start:start + 100], status="ACTIVE",
                                  task_state=None)
    return 1000 * (time.thread_time() - cpu0), 1000 * (time.perf_counter() - wall0)


def spin(stop: threading.Event) -> None:
    count = 0
    while not stop.is_set():
        count += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[1000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="give up a case whose first run took longer (seconds)")
    args = parser.parse_args()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    print(f"{'N':>6} {'busy':>5} {'CPU ms':>9} {'wall ms':>10}  (median of {args.repeat})")
    with tempfile.TemporaryDirectory(prefix="ff-bench-") as workdir:
        database = dbmod.Database(f"sqlite:///{workdir}/fleetflow.db")
        database.upgrade()
        for n in args.n:
            for busy in (0, 1):
                stop = threading.Event()
                spinners = [threading.Thread(target=spin, args=(stop,), daemon=True)
                            for _ in range(busy)]
                for spinner in spinners:
                    spinner.start()
                runs = []
                try:
                    for _ in range(args.repeat):
                        runs.append(write_all(database, n))
                        if runs[-1][1] > 1000 * args.timeout:
                            break
                finally:
                    stop.set()
                    for spinner in spinners:
                        spinner.join()
                cpu = statistics.median(r[0] for r in runs)
                wall = statistics.median(r[1] for r in runs)
                print(f"{n:>6} {busy:>5} {cpu:>9.1f} {wall:>10.1f}"
                      + ("" if len(runs) == args.repeat else f"  ({len(runs)} run)"),
                      flush=True)
        database.dispose()


if __name__ == "__main__":
    main()
