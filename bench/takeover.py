"""How long a job stays stuck after its conductor is killed with kill -9.

Two ``fleetflow conductor`` processes share a board; a flow whose one task
runs long is submitted; when one conductor has started the task it is killed
with SIGKILL, and the time until the other conductor starts the same task
(from its checkpoint) is the takeover time. Expected: at most the claim
expiry plus one keep-alive interval plus one board poll (0.5 s).

    python bench/takeover.py                            # SQL board on SQLite
    python bench/takeover.py --board redis --db postgresql+psycopg://postgres@127.0.0.1/fb
    python bench/takeover.py --expiry 30 --keepalive 10 --rounds 2   # the defaults
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import sqlalchemy as sa
from taskflow import task
from taskflow.patterns import linear_flow

from fleetflow.flows import registry

MARKS = "CREATE TABLE IF NOT EXISTS bench_takeover (flow_id VARCHAR(36), pid INTEGER, at FLOAT)"


class HoldTheJob(task.Task):
    """Marks that it started (pid, time), then runs for a long time. Revert: nothing."""

    def execute(self, flow_id):
        from fleetflow.common import config
        from fleetflow.persistence.db import get_database

        with get_database(config.load(args=[])).session() as session:
            session.execute(sa.text("INSERT INTO bench_takeover VALUES (:f, :p, :t)"),
                            {"f": flow_id, "p": os.getpid(), "t": time.time()})
        time.sleep(60)


def hold_flow():
    """One long task: hold-the-job."""
    return linear_flow.Flow("bench-takeover").add(HoldTheJob("hold-the-job"))


# Registered under the module's importable name ("takeover"), never as
# "__main__", which a conductor could not import.
if __name__ != "__main__":
    registry.register("bench-takeover", hold_flow)


def _marks(database, flow_id):
    with database.session() as session:
        return session.execute(sa.text("SELECT pid, at FROM bench_takeover WHERE flow_id = :f "
                                       "ORDER BY at"), {"f": flow_id}).all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", choices=["sql", "redis"], default="sql")
    parser.add_argument("--db", default=None, help="database URL (default: SQLite in a tmp dir)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--expiry", type=int, default=2)
    parser.add_argument("--keepalive", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from fleetflow.common import config
    from fleetflow.engine.backend import get_backend
    from fleetflow.engine.jobboard.boards import make_jobboard
    from fleetflow.engine.submit import submit
    from fleetflow.persistence.db import Database

    workdir = tempfile.mkdtemp(prefix="fleetflow-takeover-")
    env = dict(os.environ,
               FLEETFLOW_STATE_DIR=workdir,
               FLEETFLOW_DATABASE_CONNECTION=args.db or f"sqlite:///{workdir}/fleetflow.db",
               FLEETFLOW_JOBBOARD_BACKEND=args.board,
               FLEETFLOW_JOBBOARD_REDIS_URL=args.redis,
               FLEETFLOW_JOBBOARD_CLAIM_EXPIRY=str(args.expiry),
               FLEETFLOW_JOBBOARD_KEEPALIVE_INTERVAL=str(args.keepalive),
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.abspath(__file__)),
                                           os.environ.get("PYTHONPATH", "")]))
    database = Database(env["FLEETFLOW_DATABASE_CONNECTION"])
    database.upgrade()
    with database.session() as session:
        session.execute(sa.text(MARKS))
    backend = get_backend(config.load(args=[], environ=env))
    import takeover  # noqa: F401  (registers the flow under an importable name)

    def conductor(name):
        log = open(os.path.join(workdir, f"{name}.log"), "ab")  # noqa: SIM115
        return subprocess.Popen([sys.executable, "-c", "from fleetflow.cli.main import main; "
                                 "main()", "conductor", "--name", name], env=env, stdout=log,
                                stderr=subprocess.STDOUT)

    def ready(name):
        with open(os.path.join(workdir, f"{name}.log"), errors="replace") as fh:
            return "worker(s) on" in fh.read()

    times = []
    for round_no in range(args.rounds):
        # Two fresh, started conductors per round: a survivor of the last
        # round would still be busy with that round's long task.
        # ... and a board of its own, free of the last round's unfinished job.
        env["FLEETFLOW_JOBBOARD_BOARD_NAME"] = f"bench-{uuid.uuid4().hex[:8]}"
        board = make_jobboard(config.load(args=[], environ=env), backend)
        names = [f"bench-{round_no}-a", f"bench-{round_no}-b"]
        procs = [conductor(name) for name in names]
        try:
            while not all(ready(name) for name in names):
                time.sleep(0.05)
            flow_id = submit(board, backend, "bench-takeover", {})
            while not _marks(database, flow_id):
                time.sleep(0.01)
            victim_pid = _marks(database, flow_id)[0][0]
            os.kill(victim_pid, signal.SIGKILL)
            killed_at = time.time()
            while len(_marks(database, flow_id)) < 2:
                time.sleep(0.01)
            took = _marks(database, flow_id)[1][1] - killed_at
            times.append(took)
            print(f"round {round_no + 1}: taken over after {took:.2f} s")
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
            board.close()
    print(f"board={args.board} expiry={args.expiry}s keepalive={args.keepalive}s "
          f"rounds={len(times)}: min {min(times):.2f} s, median "
          f"{statistics.median(times):.2f} s, max {max(times):.2f} s "
          f"(bound: expiry + keep-alive + 0.5 s poll = "
          f"{args.expiry + args.keepalive + 0.5:.1f} s)")


if __name__ == "__main__":
    main()
