"""Placement claims per second: SQLite and PostgreSQL, 1 and 8 writer processes.

Every writer claims for new consumers on 3 hot providers (the provision
flow's path: ``PUT /allocations/{consumer}`` with ``consumer_generation:
null``, one transaction each, provider generation compare-and-swap), so all
writers contend for the same three provider rows. A last case measures the
fast path: 1,000 consumers claimed in one ``POST /allocations`` transaction.

    python bench/placement_claims.py [--claims 400] [--pg-url postgresql+psycopg://...]

Prints a Markdown table. PostgreSQL runs in a scratch database that is
dropped afterwards; leave out the server with ``--no-pg``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
import uuid

import sqlalchemy as sa

from fleetflow.persistence.db import Database
from fleetflow.persistence.placement.client import LocalPlacement
from fleetflow.persistence.placement.store import PlacementStore

PROVIDERS = [str(uuid.UUID(int=i + 1)) for i in range(3)]


def prepare(url: str) -> None:
    database = Database(url)
    database.upgrade()
    store = PlacementStore(database)
    for i, rp in enumerate(PROVIDERS):
        store.create_provider(f"hot-{i}", rp)
        # Room for every claim of the run: we measure claims, not refusals.
        store.set_inventories(rp, 0, {"VCPU": {"total": 1_000_000},
                                      "MEMORY_MB": {"total": 1_000_000_000}})
    database.dispose()


def writer(url: str, claims: int, index: int, start, results) -> None:
    database = Database(url, pool_size=1, max_overflow=0)
    client = LocalPlacement(PlacementStore(database, max_retries=100))
    start.wait()
    began = time.perf_counter()
    for i in range(claims):
        client.claim(str(uuid.uuid4()), {PROVIDERS[(index + i) % 3]: {"VCPU": 1,
                                                                     "MEMORY_MB": 512}},
                     "bench", "bench")
    results.put(time.perf_counter() - began)
    database.dispose()


def run_writers(url: str, writers: int, claims: int) -> float:
    """Claims per second of ``writers`` processes doing ``claims`` each."""
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(url, claims, i, start, results))
             for i in range(writers)]
    for proc in procs:
        proc.start()
    time.sleep(0.5)  # let every process connect before the clock starts
    began = time.perf_counter()
    start.set()
    for proc in procs:
        proc.join()
    elapsed = time.perf_counter() - began
    for _ in procs:
        results.get(timeout=5)
    return writers * claims / elapsed


def run_bulk(url: str, count: int = 1000) -> float:
    """Seconds to claim ``count`` new consumers in one transaction."""
    database = Database(url)
    store = PlacementStore(database)
    claims = {str(uuid.uuid4()): {PROVIDERS[i % 3]: {"VCPU": 1}} for i in range(count)}
    began = time.perf_counter()
    store.claim_many(claims, "bench", "bench")
    elapsed = time.perf_counter() - began
    database.dispose()
    return elapsed


def scratch_pg(admin_url: str):
    name = "fleetflow_bench_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    return admin, name, admin_url.rsplit("/", 1)[0] + "/" + name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=400, help="claims per writer")
    parser.add_argument("--pg-url", default=os.environ.get(
        "FLEETFLOW_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        targets = [("SQLite (WAL file)", f"sqlite:///{tmp}/bench.db", None)]
        if not args.no_pg:
            targets.append(("PostgreSQL", None, args.pg_url))
        for label, url, admin_url in targets:
            admin = name = None
            if admin_url:
                admin, name, url = scratch_pg(admin_url)
            try:
                prepare(url)
                for writers in (1, 8):
                    rate = run_writers(url, writers, args.claims)
                    rows.append((label, f"{writers} writer(s) x {args.claims} claims",
                                 f"{rate:,.0f} claims/s"))
                bulk = run_bulk(url)
                rows.append((label, "1,000 consumers in one POST transaction",
                             f"{bulk:.2f} s ({1000 / bulk:,.0f} claims/s)"))
            finally:
                if admin is not None:
                    with admin.connect() as conn:
                        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                    admin.dispose()
    print("| database | case | result |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
