"""Compute RPC throughput: calls/s in-process and over RabbitMQ, sequential and threaded.

    python bench/rpc.py [--calls 400] [--threads 16] [--fleet-hosts 10000]
                        [--rabbit-url rabbit://guest:guest@127.0.0.1:5672/]

In-process runs the embedded fleet agent on ``kombu+memory://localhost//`` and
``fake:``; ``fleetflow-ipc`` (Unix sockets, as ``fleetflow serve`` reaches its
agents) and RabbitMQ run ``fleetflow compute-agent --all`` in a separate
process. Each mode measures ``ping`` and ``build_instance`` (boot_seconds = 0,
so the figure is RPC + the driver's SQLite writes). ``--fleet-hosts`` serves a
fleet of that many hosts from one agent and builds one instance on each of
``--calls`` different hosts, to show one server carries a large fleet.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from fleetflow.common import config
from fleetflow.compute import agent as compute_agent
from fleetflow.compute import messaging
from fleetflow.compute.exceptions import OutcomeUnknown
from fleetflow.compute.rpcapi import ComputeAPI
from fleetflow.persistence.db import Database
from fleetflow.persistence.models import Host

INVENTORY = {"VCPU": {"total": 100000, "allocation_ratio": 1.0, "reserved": 0}}


def make_cloud(directory: str, hosts: int, transport_url: str) -> tuple:
    db_url = f"sqlite:///{directory}/fleetflow.db"
    conf_file = os.path.join(directory, "fleetflow.conf")
    with open(conf_file, "w") as f:
        f.write(f"[DEFAULT]\nstate_dir = {directory}\n[database]\nconnection = {db_url}\n"
                f"[messaging]\ntransport_url = {transport_url}\n"
                f"topic = bench-{uuid.uuid4().hex[:8]}\nrpc_timeout = 30\n")
    database = Database(db_url)
    database.upgrade()
    with database.session() as session:
        session.add_all(Host(uuid=str(uuid.uuid4()), name=f"bh{i}", region="r", zone="z",
                             rack=f"k{i // 40}", inventory=INVENTORY) for i in range(hosts))
    conf = config.load(args=["--config-file", conf_file], environ={})
    return conf, conf_file, database


def rate(label: str, calls: int, threads: int, fn) -> float:
    """Run ``fn(i)`` for i in range(calls) on ``threads`` threads; print calls/s."""
    start = time.perf_counter()
    if threads == 1:
        for i in range(calls):
            fn(i)
    else:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(fn, range(calls)))
    per_second = calls / (time.perf_counter() - start)
    print(f"  {label:<44} {per_second:8.1f} calls/s  ({calls} calls, {threads} threads)")
    return per_second


def measure(api: ComputeAPI, hosts: int, calls: int, threads: int, tag: str) -> None:
    names = [f"bh{i}" for i in range(hosts)]
    api.ping(names[0])  # connect and warm up
    for n in (1, threads):
        rate("ping", calls, n, lambda i: api.ping(names[i % hosts]))
        rate("build_instance (new uuid each)", calls, n,
             lambda i, n=n: api.build_instance(names[i % hosts], f"{tag}-{n}-{i}", {"VCPU": 1}))


def bench_in_process(args, transport_url: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        conf, _, database = make_cloud(directory, 4, transport_url)
        agent = compute_agent.serve_fleet(conf, database)
        try:
            print(f"in-process, {transport_url}")
            calls = args.calls if transport_url != "fake:" else max(40, args.calls // 10)
            measure(ComputeAPI(conf, database), 4, calls, args.threads, "inproc")
        finally:
            agent.stop()
            messaging.forget_transport(conf)
            database.dispose()


def bench_other_process(args, url: str, label: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        url = url.format(directory=directory)
        conf, conf_file, database = make_cloud(directory, 4, url)
        fleetflow = os.path.join(os.path.dirname(sys.executable), "fleetflow")
        proc = subprocess.Popen([fleetflow, "--config-file", conf_file, "compute-agent",
                                 "--all", "--server-name", f"bench-{os.getpid()}"],
                                stderr=subprocess.DEVNULL)
        try:
            api = ComputeAPI(conf, database)
            while True:
                api.routes.refresh()
                try:
                    api.ping("bh0", timeout=1)
                    break
                except OutcomeUnknown:
                    if proc.poll() is not None:
                        raise SystemExit("compute agent exited") from None
            print(f"{label}, agent in another process ({url})")
            cpu = time.process_time()
            measure(api, 4, args.calls, args.threads, label)
            calls = 4 * args.calls
            print(f"  {'caller CPU per call':<44} "
                  f"{1000 * (time.process_time() - cpu) / calls:8.3f} ms")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            messaging.forget_transport(conf)
            database.dispose()


def bench_fleet(args) -> None:
    with tempfile.TemporaryDirectory() as directory:
        start = time.perf_counter()
        conf, _, database = make_cloud(directory, args.fleet_hosts, "kombu+memory://localhost//")
        loaded = time.perf_counter()
        agent = compute_agent.serve_fleet(conf, database)
        served = time.perf_counter()
        try:
            print(f"fleet of {args.fleet_hosts} hosts, one in-process agent")
            print(f"  {'host rows written':<44} {loaded - start:8.2f} s")
            print(f"  {'serve_fleet start (routes + driver)':<44} {served - loaded:8.2f} s")
            api = ComputeAPI(conf, database)
            step = max(1, args.fleet_hosts // args.calls)
            rate("build_instance on distinct hosts", args.calls, args.threads,
                 lambda i: api.build_instance(f"bh{(i * step) % args.fleet_hosts}",
                                              f"fleet-{i}", {"VCPU": 1}))
        finally:
            agent.stop()
            messaging.forget_transport(conf)
            database.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--rabbit-url", default="rabbit://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--skip-rabbit", action="store_true")
    parser.add_argument("--fleet-hosts", type=int, default=10000)
    args = parser.parse_args()
    bench_in_process(args, "kombu+memory://localhost//")
    bench_in_process(args, "fake:")
    bench_other_process(args, "fleetflow-ipc://{directory}/rpc", "fleetflow-ipc")
    if not args.skip_rabbit:
        bench_other_process(args, args.rabbit_url, "RabbitMQ")
    if args.fleet_hosts:
        bench_fleet(args)


if __name__ == "__main__":
    main()
