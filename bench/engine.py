"""Benchmark: compile and run a reservation-shaped TaskFlow flow of N instances.

The flow is ``linear(schedule, unordered(linear[retry](claim, boot, attach) x N))``:
one schedule task, then per instance a linear subflow with a retry controller
and three tasks, i.e. 4N+1 atoms with trivial bodies and deterministic names
(``inst-0003-claim``). Each claim reads the schedule's output and each later
step reads its predecessor's, so argument lookup walks the scopes as a real
reservation does.

Every N runs in its own subprocess so peak RSS (``getrusage``) is per run.

    python bench/engine.py --n 100 1000 --backend memory
    python bench/engine.py --n 1000 --backend taskflow-sql --stock
    python bench/engine.py --n 1000 5000 --backend fleetflow-sql --db postgresql

``--engine`` picks the engine (``fleetflow-parallel`` by default, TaskFlow's
stock ``parallel`` or ``serial``); the tasks are built on fleetflow's atom
base (``plugin.atoms.FastAtom``) as fleetflow's own tasks are, unless
``--stock``, which runs TaskFlow's stock parallel engine on stock atoms (the
"before" of every speed-up).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
import warnings


def build_flow(n: int, stock_atoms: bool = False):
    """The reservation-shaped flow of ``n`` instances (4n+1 atoms)."""
    from taskflow import retry
    from taskflow import task as tf_task
    from taskflow.patterns import linear_flow, unordered_flow

    from fleetflow.plugin.atoms import FastAtom

    class Task(tf_task.Task if stock_atoms else FastAtom, tf_task.Task):
        pass

    class Schedule(Task):
        default_provides = "placements"

        def execute(self):
            return {"hosts": n}

    class Claim(Task):
        def execute(self, placements):
            return 1

    class Step(Task):
        def execute(self, previous):
            return previous + 1

    instances = unordered_flow.Flow("instances")
    for i in range(n):
        prefix = f"inst-{i:04d}"
        sub = linear_flow.Flow(prefix, retry=retry.Times(2, name=f"{prefix}-retry"))
        sub.add(Claim(f"{prefix}-claim", provides=f"{prefix}-claimed"),
                Step(f"{prefix}-boot", rebind={"previous": f"{prefix}-claimed"},
                     provides=f"{prefix}-booted"),
                Step(f"{prefix}-attach", rebind={"previous": f"{prefix}-booted"},
                     provides=f"{prefix}-attached"))
        instances.add(sub)
    return linear_flow.Flow("reservation").add(Schedule("schedule"), instances)


class CountingConnection:
    """Delegates to a persistence connection, counting the writes it is asked for."""

    # update_atom_details_many: one batch of checkpoints, one transaction (fleetflow engine).
    WRITES = ("update_atom_details", "update_atom_details_many", "update_flow_details",
              "update_flow_fields",
              "save_logbook")

    def __init__(self, conn, counter):
        self._conn = conn
        self._counter = counter

    def __getattr__(self, name):
        attr = getattr(self._conn, name)
        if name in self.WRITES:
            def counted(*args, **kwargs):
                self._counter[name] = self._counter.get(name, 0) + 1
                return attr(*args, **kwargs)
            return counted
        return attr


class CountingBackend:
    """Wraps a persistence backend so every connection it hands out counts writes."""

    def __init__(self, backend):
        self.backend = backend
        self.counter: dict[str, int] = {}

    def get_connection(self):
        return CountingConnection(self.backend.get_connection(), self.counter)

    def close(self):
        self.backend.close()


@contextlib.contextmanager
def _database_url(db: str, workdir: str):
    if db == "sqlite":
        yield f"sqlite:///{workdir}/bench.db"
        return
    import cluster

    with cluster.database() as url:
        yield url


def _make_backend(kind: str, url: str):
    from taskflow.persistence import backends
    from taskflow.persistence.backends import impl_memory

    if kind == "memory":
        # What an engine given no backend uses.
        return impl_memory.MemoryBackend({"deep_copy": False})
    if kind == "taskflow-sql":
        return backends.fetch({"connection": url})
    # Ours, found through the same entry point mechanism TaskFlow uses.
    return backends.fetch({"connection": "fleetflow+" + url})


def _cpu_seconds() -> float:
    # CPU time of every thread of this process: on a shared, busy machine
    # it varies far less than wall time (waits for I/O are not in it).
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_one(args) -> dict:
    """Build, compile, prepare and run one flow; return the measurements."""
    warnings.simplefilter("ignore", DeprecationWarning)
    from taskflow import engines as tf_engines
    from taskflow.persistence import models

    engine_name = "parallel" if args.stock else args.engine
    with tempfile.TemporaryDirectory() as workdir, _database_url(args.db, workdir) as url:
        inner = _make_backend(args.backend, url)
        backend = CountingBackend(inner)
        with contextlib.closing(inner.get_connection()) as conn:
            conn.upgrade()
        book = models.LogBook("bench")
        detail = models.FlowDetail("reservation", uuid=str(uuid.uuid4()))
        book.add(detail)
        with contextlib.closing(inner.get_connection()) as conn:
            conn.save_logbook(book)
        flow = build_flow(args.one, stock_atoms=args.stock)
        options = {}
        if engine_name != "serial":
            options = {"executor": "threads", "max_workers": args.workers}
        engine = tf_engines.load(flow, flow_detail=detail, backend=backend,
                                 engine=engine_name, **options)
        t0, c0 = time.perf_counter(), _cpu_seconds()
        engine.compile()
        t1, c1 = time.perf_counter(), _cpu_seconds()
        engine.prepare()
        engine.validate()
        t2 = time.perf_counter()
        cpu0 = _cpu_seconds()
        engine.run()
        t3 = time.perf_counter()
        run_cpu = _cpu_seconds() - cpu0
        state = engine.storage.get_flow_state()
        inner.close()
    return {
        "n": args.one, "atoms": 4 * args.one + 1, "backend": args.backend,
        "db": args.db if args.backend != "memory" else "-", "stock": args.stock,
        "engine": engine_name, "compile_s": round(t1 - t0, 3),
        "compile_cpu_s": round(c1 - c0, 3),
        "prepare_validate_s": round(t2 - t1, 3), "run_s": round(t3 - t2, 3),
        "run_cpu_s": round(run_cpu, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "checkpoints": sum(backend.counter.values()), "state": state,
    }


def _without_n(argv: list[str]) -> list[str]:
    out, skipping = [], False
    for arg in argv:
        if arg == "--n":
            skipping = True
            continue
        if skipping and not arg.startswith("--"):
            continue
        skipping = False
        out.append(arg)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--backend", default="memory",
                        choices=["memory", "taskflow-sql", "fleetflow-sql"])
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgresql"])
    parser.add_argument("--engine", default="fleetflow-parallel",
                        choices=["fleetflow-parallel", "parallel", "serial"])
    parser.add_argument("--workers", type=int, default=64,
                        help="Threads of the parallel engine (conductor.engine_workers).")
    parser.add_argument("--stock", action="store_true",
                        help="TaskFlow's stock parallel engine on stock atoms.")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(run_one(args)))
        return 0
    header = ("N", "atoms", "backend", "db", "stock", "compile s", "compile CPU s",
              "prepare+validate s", "run s", "run CPU s", "peak RSS MB", "checkpoints", "state")
    print(" | ".join(header))
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:])]
    # --n is replaced by --one per child.
    passthrough = _without_n(passthrough)
    for n in args.n:
        # One process per N, so the RSS peak of one run does not hide the next.
        cmd = [sys.executable, os.path.abspath(__file__), *passthrough, "--one", str(n)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"N={n} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
            return 1
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(" | ".join(str(r[k]) for k in (
            "n", "atoms", "backend", "db", "stock", "compile_s", "compile_cpu_s",
            "prepare_validate_s", "run_s", "run_cpu_s", "peak_rss_mb", "checkpoints",
            "state")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
