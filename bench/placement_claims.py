"""Placement claims per second: SQLite and PostgreSQL, 1 and 8 writer processes.

Every writer claims for new consumers on 3 hot providers (the provision
flow's path: ``PUT /allocations/{consumer}`` with ``consumer_generation:
null``, one transaction each, provider generation compare-and-swap), so all
writers contend for the same three provider rows. A last case measures the
fast path: 1,000 consumers claimed in one ``POST /allocations`` transaction.

    python bench/placement_claims.py [--claims 400] [--pg-url postgresql+psycopg://...]

``--http`` measures the same claims over HTTP instead, side by side:
fleetflow's ``/placement`` (a ``fleetflow serve`` on a scratch state
directory) and OpenStack Placement 16.0.0 under gunicorn (installed in a
virtualenv of its own, ``--venv``, cached in the user's cache directory),
each on a SQLite file of its own and on a scratch PostgreSQL database, with
1 and 8 client processes claiming, or claiming then releasing
(bench/placement_http.py)::

    python bench/placement_claims.py --http [--claims 100] [--rounds 2] [--no-pg]

Prints a Markdown table. PostgreSQL runs in a scratch database that is
dropped afterwards; leave out the server with ``--no-pg``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
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


def drop_pg(admin, name: str) -> None:
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


def placement_concurrency(args, sqlite: bool) -> tuple[int, int]:
    """gunicorn workers and threads of OpenStack Placement.

    On SQLite a second writer, thread or process, makes Placement answer 500
    ("database is locked"): one of each. On PostgreSQL, a worker per CPU.
    """
    workers = args.placement_workers or (1 if sqlite else os.cpu_count() or 1)
    threads = args.placement_threads or (1 if sqlite else 4)
    return workers, threads


def start_http_servers(args, workdir: str, venv: str, admin_url: str | None, scratch: list):
    """fleetflow serve and OpenStack Placement on databases of their own, providers made."""
    from http_servers import FleetflowServe, RealPlacement
    from placement_http import prepare

    servers = {}
    for name in ("fleetflow", "placement"):
        home = os.path.join(workdir, name)
        os.makedirs(home)
        url = None if name == "fleetflow" else f"sqlite:///{home}/placement.db"
        if admin_url:
            admin, db_name, url = scratch_pg(admin_url)
            scratch.append((admin, db_name))
        if name == "fleetflow":
            server = FleetflowServe(home, url)
        else:
            workers, threads = placement_concurrency(args, admin_url is None)
            server = RealPlacement(home, venv, url, workers, threads)
        servers[name] = server
        server.start()
        prepare(server.root)
    return servers


def main_http(args) -> None:
    import http_servers
    import placement_http

    venv = http_servers.ensure_venv(args.venv or http_servers.default_venv())
    rows, checks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        backends = [("SQLite", None)] + ([] if args.no_pg else [("PostgreSQL", args.pg_url)])
        for label, admin_url in backends:
            scratch, servers = [], {}
            try:
                servers = start_http_servers(args, os.path.join(tmp, label), venv,
                                             admin_url, scratch)
                kept = {name: dict.fromkeys(placement_http.PROVIDERS, 0) for name in servers}
                rates, retries = {}, dict.fromkeys(servers, 0)
                for round_ in range(args.rounds):
                    for clients in (1, 8):
                        for mode in placement_http.MODES:
                            # Interleaved, each server first in every other round.
                            names = sorted(servers, reverse=bool(round_ % 2))
                            for name in names:
                                rate, claimed, tries = placement_http.run_clients(
                                    servers[name].root, clients, args.claims, mode)
                                rates.setdefault((clients, mode, name), []).append(rate)
                                retries[name] += tries
                                for rp, count in claimed.items():
                                    kept[name][rp] += count
                for name, server in servers.items():
                    over, mismatched = placement_http.check(server.root, kept[name])
                    checks.append((label, name, over, mismatched, retries[name]))
                for clients in (1, 8):
                    for mode in placement_http.MODES:
                        ours = statistics.median(rates[(clients, mode, "fleetflow")])
                        real = statistics.median(rates[(clients, mode, "placement")])
                        rows.append((label, "fleetflow serve", clients, mode,
                                     f"{ours:,.0f}", f"{ours / real:.1f}x"))
                        rows.append((label, "Placement 16.0.0 (gunicorn)", clients, mode,
                                     f"{real:,.0f}", ""))
            finally:
                for server in servers.values():
                    server.stop()
                for admin, name in scratch:
                    drop_pg(admin, name)
    print(f"{args.claims} claims per client, median of {args.rounds} interleaved round(s); "
          "Placement under gunicorn (gthread), workers x threads: "
          f"SQLite {placement_concurrency(args, True)}, "
          f"PostgreSQL {placement_concurrency(args, False)}\n")
    print("| backend | server | clients | mode | claims/s | ratio fleetflow/real |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    print("\n| backend | server | overcommit | providers whose usage != claims kept "
          "| 409 retries |")
    print("| --- | --- | --- | --- | --- |")
    for row in checks:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=None,
                        help="claims per writer (default 400) or per HTTP client (100)")
    parser.add_argument("--pg-url", default=os.environ.get(
        "FLEETFLOW_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--http", action="store_true",
                        help="over HTTP, fleetflow serve beside OpenStack Placement")
    parser.add_argument("--venv", help="virtualenv of OpenStack Placement (made if missing)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (--http)")
    parser.add_argument("--placement-workers", type=int, default=None,
                        help="gunicorn workers of Placement (default: 1 on SQLite, one "
                             "per CPU on PostgreSQL)")
    parser.add_argument("--placement-threads", type=int, default=None,
                        help="threads per worker (default: 1 on SQLite, 4 on PostgreSQL)")
    args = parser.parse_args()
    if args.http:
        args.claims = args.claims or 100
        main_http(args)
        return
    args.claims = args.claims or 400

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
                    drop_pg(admin, name)
    print("| database | case | result |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
