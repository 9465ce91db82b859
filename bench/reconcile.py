"""What one reconcile pass costs with many finished flows in the database.

The database gets ``--finished`` flows that ended (SUCCESS, with their
logbook, three atom details each and a materialized intent), and
``--unfinished`` RUNNING flows whose jobs are on the board; then one pass of
engine/reconcile.py is timed, ``--repeat`` times. A pass finds nothing to do
here: the figure is its fixed cost, the one paid every reconcile interval.
``--no-index`` drops the flow details' state index first, to see what it buys.

    python bench/reconcile.py                                   # SQLite, SQL board
    python bench/reconcile.py --db postgresql+psycopg://postgres@127.0.0.1/bench_reconcile
    python bench/reconcile.py --board redis --redis redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import tempfile
import time
import uuid

import sqlalchemy as sa

from fleetflow.common import config

BATCH = 2000


def _rows(count: int, state: str, board: str):
    """Logbook, flow detail, atom details and intent rows of ``count`` flows."""
    now = time.time()
    for _ in range(count):
        flow_id = str(uuid.uuid4())
        meta = {"store": {"flow_id": flow_id, "tenant_id": "bench",
                          "instance_uuids": [str(uuid.uuid4()) for _ in range(8)]},
                "fleetflow": {"flow_name": "provision", "owner_tenant": "bench",
                              "on_error": "revert", "submitted_at": "2026-01-01T00:00:00",
                              "board": board}}
        yield flow_id, now, state, json.dumps(meta)


def fill(database, board: str, finished: int, unfinished: int) -> list[str]:
    """Write the flows; returns the unfinished flows' ids."""
    from fleetflow.persistence.intents import FlowIntent
    from fleetflow.persistence.logbook.models import ATOMDETAILS, FLOWDETAILS, LOGBOOKS

    stamp = dt.datetime(2026, 1, 1)
    running = []
    for state, count in (("SUCCESS", finished), ("RUNNING", unfinished)):
        rows = list(_rows(count, state, board))
        for start in range(0, len(rows), BATCH):
            chunk = rows[start:start + BATCH]
            with database.transaction() as conn:
                conn.execute(sa.insert(LOGBOOKS), [
                    {"uuid": f, "name": f"provision-{f}", "meta": "{}", "created_at": stamp,
                     "updated_at": stamp} for f, *_ in chunk])
                conn.execute(sa.insert(FLOWDETAILS), [
                    {"uuid": f, "parent_uuid": f, "name": "provision", "state": s, "meta": m,
                     "created_at": stamp, "updated_at": stamp} for f, _, s, m in chunk])
                conn.execute(sa.insert(ATOMDETAILS), [
                    {"uuid": str(uuid.uuid4()), "parent_uuid": f, "name": f"step-{i}",
                     "atom_type": "TASK_DETAIL", "state": "SUCCESS", "intention": "EXECUTE",
                     "updated_at": stamp} for f, *_ in chunk for i in range(3)])
                conn.execute(sa.insert(FlowIntent.__table__), [
                    {"flow_id": f, "board": board, "flow_name": "provision",
                     "flow_module": "bench",
                     "flow_kwargs": {}, "store": {}, "owner_tenant": "bench",
                     "on_error": "revert", "created_at": stamp, "materialized_at": stamp}
                    for f, *_ in chunk])
        if state == "RUNNING":
            running = [f for f, *_ in rows]
    return running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="SQLAlchemy URL of an EMPTY database "
                                     "(default: a new SQLite file)")
    parser.add_argument("--board", choices=["sql", "redis"], default="sql")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--finished", type=int, default=10_000)
    parser.add_argument("--unfinished", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-index", action="store_true",
                        help="drop ix_tf_flowdetails_state before measuring")
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="bench-reconcile-")
    url = args.db or f"sqlite:///{os.path.join(workdir, 'fleetflow.db')}"
    board_name = f"bench-{uuid.uuid4().hex[:8]}"
    conf = config.load(args=[], environ={
        "FLEETFLOW_STATE_DIR": workdir, "FLEETFLOW_DATABASE_CONNECTION": url,
        "FLEETFLOW_JOBBOARD_BACKEND": args.board, "FLEETFLOW_JOBBOARD_REDIS_URL": args.redis,
        "FLEETFLOW_JOBBOARD_BOARD_NAME": board_name})

    from taskflow.persistence import models as tf_models

    from fleetflow.engine import reconcile
    from fleetflow.engine.backend import get_backend
    from fleetflow.engine.jobboard.boards import make_jobboard
    from fleetflow.persistence.db import get_database

    database = get_database(conf)
    database.upgrade()
    started = time.perf_counter()
    running = fill(database, board_name, args.finished, args.unfinished)
    print(f"filled {args.finished} finished + {args.unfinished} running flows "
          f"in {time.perf_counter() - started:.1f} s ({database.dialect})")
    if args.no_index:
        with database.transaction() as conn:
            conn.exec_driver_sql("DROP INDEX ix_tf_flowdetails_state")
    backend = get_backend(conf)
    board = make_jobboard(conf, backend)
    try:
        for flow_id in running:
            board.post(flow_id, book=tf_models.LogBook(f"provision-{flow_id}", uuid=flow_id),
                       details={"flow_uuid": flow_id})
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            counts = reconcile.reconcile(board, backend, database, conf,
                                         reconcile.Memory())
            times.append(time.perf_counter() - start)
        print(f"counts of the last pass: {counts}")
        print(f"one pass ({args.board} board, index {'dropped' if args.no_index else 'on'}): "
              f"best {min(times) * 1000:.1f} ms, median {statistics.median(times) * 1000:.1f} ms "
              f"over {args.repeat}")
    finally:
        if args.board == "redis":
            import redis

            client = redis.Redis.from_url(args.redis)
            for key in client.scan_iter(match=f"{board_name}*"):
                client.delete(key)
            client.close()
        board.close()
        database.dispose()


if __name__ == "__main__":
    main()
