"""A distributed fleetflow for the benchmarks: PostgreSQL, Redis's jobboard, RabbitMQ's RPC.

:func:`distributed` starts what the README's "Distributed mode" starts, each run on a
database, a board and an RPC topic of its own (nothing else on the servers sees its jobs
or calls): ``db upgrade`` and ``fleet load`` on a fresh PostgreSQL database, one
``compute-agent --all`` per shard, ``conductors`` ``fleetflow conductor`` processes and a
``fleetflow serve`` that runs no conductor itself. The servers are the ones the
distributed tests use (``FLEETFLOW_TEST_PG_URL``, ``FLEETFLOW_TEST_REDIS_URL``,
``FLEETFLOW_TEST_RABBIT_URL`` override them).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid

import requests
import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get("FLEETFLOW_TEST_PG_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("FLEETFLOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
RABBIT_URL = os.environ.get("FLEETFLOW_TEST_RABBIT_URL", "rabbit://guest:guest@127.0.0.1:5672/")


@contextlib.contextmanager
def database():
    """Yield the URL of a fresh PostgreSQL database, dropped afterwards."""
    name = "fleetflow_bench_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def stop(procs: list[subprocess.Popen]) -> None:
    """Terminate ``procs``; kill any still running 30 s later."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def distributed(workdir: str, fleet: str, port: int, conductors: int, env_extra: dict,
                agents: int = 2):
    """Yield ``(serve, url, processes)`` of a distributed fleetflow on ``fleet``."""
    run = uuid.uuid4().hex[:8]
    with database() as connection:
        env = dict(os.environ, FLEETFLOW_DATABASE_CONNECTION=connection,
                   FLEETFLOW_JOBBOARD_BACKEND="redis", FLEETFLOW_JOBBOARD_REDIS_URL=REDIS_URL,
                   FLEETFLOW_JOBBOARD_BOARD_NAME=f"bench-{run}",
                   FLEETFLOW_MESSAGING_TRANSPORT_URL=RABBIT_URL,
                   FLEETFLOW_MESSAGING_TOPIC=f"bench-{run}", FLEETFLOW_COMPUTE_SIMULATE="false",
                   FLEETFLOW_FLEET_FILE=fleet, FLEETFLOW_STATE_DIR=workdir,
                   FLEETFLOW_API_PORT=str(port), **env_extra)
        for step in (["db", "upgrade"], ["fleet", "load"]):
            subprocess.run(["fleetflow", *step], cwd=workdir, env=env, check=True,
                           capture_output=True)
        procs: list[subprocess.Popen] = []

        def start(name: str, *argv: str, **extra: str) -> subprocess.Popen:
            log = open(os.path.join(workdir, f"{name}.log"), "w")  # noqa: SIM115
            proc = subprocess.Popen(["fleetflow", *argv], cwd=workdir, env=dict(env, **extra),
                                    stdout=log, stderr=subprocess.STDOUT)
            procs.append(proc)
            return proc

        try:
            for shard in range(agents):
                start(f"agent-{shard}", "compute-agent", "--all", "--shard", f"{shard}/{agents}",
                      "--server-name", f"bench-{run}-agent-{shard}")
            for index in range(conductors):
                start(f"conductor-{index}", "conductor", "--name", f"bench-{run}-{index}")
            serve = start("serve", "serve", FLEETFLOW_CONDUCTOR_WORKERS="0")
            url = f"http://127.0.0.1:{port}"
            _wait_answering(url, serve, workdir)
            yield serve, url, procs
        finally:
            stop(procs)


def _wait_answering(url: str, serve: subprocess.Popen, workdir: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            requests.get(f"{url}/openapi.json", timeout=2)
            return
        except requests.ConnectionError:
            if serve.poll() is not None:
                raise SystemExit(f"fleetflow serve exited; see {workdir}/serve.log") from None
            time.sleep(0.2)
    raise SystemExit("fleetflow serve did not start")
