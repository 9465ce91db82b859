"""Start conductor processes in a fraction of a second: fork them from a warmed-up parent.

Importing TaskFlow, oslo and SQLAlchemy takes seconds per interpreter on a
busy machine, and the takeover tests start dozens of conductors. A fork
server imports everything once, then forks one child per conductor; each
child is a real, separate process running ``fleetflow conductor`` (the same
click command), killed with real signals. The server holds no threads, no
database connections and no sockets when it forks.

Protocol: one JSON line per request on the server's stdin, one JSON reply on
its stdout: ``{"op": "spawn", "args", "env", "log"} -> {"pid"}`` and
``{"op": "status", "pid"} -> {"code"}`` (None while running, -N after signal N).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback

PRELOAD = (
    "fleetflow.cli.main", "fleetflow.engine.conductor.worker", "fleetflow.engine.conductor.pool",
    "fleetflow.engine.engines",
    "fleetflow.engine.jobboard.boards", "fleetflow.engine.backend", "fleetflow.engine.submit",
    "fleetflow.flows.runtime", "fleetflow.compute.drivers.fake", "fleetflow.compute.rpcapi",
    # What every conductor imports as it starts (flows.runtime.install_from_conf, the
    # queue's admitter): left to each child, they took 13% of its CPU.
    "fleetflow.cli.conductor", "fleetflow.flows.evacuate", "fleetflow.flows.provision",
    "fleetflow.flows.vcluster", "fleetflow.services.queue.admitter",
    "fleetflow.services.reservations", "fleetflow.services.vclusters",
    "fleetflow.persistence.placement.client", "fleetflow.persistence.placement.store",
    "fleetflow.persistence.migrate", "taskflow.engines.action_engine.engine",
    "taskflow.conductors.backends.impl_blocking", "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql.psycopg", "psycopg", "redis", "alembic.script",
    "takeover_flow",
)


def serve() -> None:
    """The fork server's main loop (runs in its own interpreter)."""
    # Replies go to a private copy of stdout; anything else printed by the
    # imports (or children) goes to stderr and cannot corrupt the protocol.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # SQLAlchemy configures the mappers on their first query: once here, not in
    # every child (about 5% of a short-lived conductor's CPU).
    from sqlalchemy import orm

    orm.configure_mappers()
    # Each conductor checks the schema is current against alembic's history, which
    # alembic reads by compiling every migration file: once here (40% of a
    # conductor's start-up when each child read it).
    from fleetflow.persistence import migrate
    from fleetflow.plugin import compat

    migrate.script_heads()
    compat.installed_version()  # which each engine load checks
    # Each conductor starts with a full collection (common/gc_policy.py), which writes
    # to every object's header and so copies the whole inherited heap page by page:
    # frozen here, with what the callers imported and the warm-ups made, the children's
    # collections skip it (a conductor's start-up CPU fell from ~0.18 s to ~0.06 s).
    gc.collect()
    gc.freeze()
    if threading.active_count() != 1:
        print(f"forkserver: {threading.active_count()} threads before fork", file=sys.stderr)
    codes: dict[int, int] = {}
    for line in sys.stdin:
        request = json.loads(line)
        _reap(codes)
        if request["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                _child(request, replies.fileno())
            # A pid is reused once the kernel wraps around (32,768 here, within one
            # CI run): an earlier child's code under it is not this child's.
            codes.pop(pid, None)
            reply = {"pid": pid}
        else:
            reply = {"code": codes.get(request["pid"])}
        replies.write(json.dumps(reply) + "\n")


def _reap(codes: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        codes[pid] = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                      else os.WEXITSTATUS(status))


def _child(request: dict, replies_fd: int) -> None:
    code = 1
    try:
        os.close(replies_fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(request["env"])
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        from fleetflow.cli.main import cli

        cli.main(args=request["args"], prog_name="fleetflow", standalone_mode=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class ForkedProcess:
    """A child of the fork server, with the parts of ``Popen`` the tests use."""

    def __init__(self, server: ForkServer, pid: int):
        self._server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"conductor {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """Client of a fork server subprocess."""

    def __init__(self, env: dict[str, str]):
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "import forkserver; forkserver.serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._lock = threading.Lock()

    def _ask(self, request: dict) -> dict:
        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the fork server died")
        return json.loads(line)

    def spawn(self, args: list[str], env: dict[str, str], log: str) -> ForkedProcess:
        reply = self._ask({"op": "spawn", "args": args, "env": env, "log": log})
        return ForkedProcess(self, reply["pid"])

    def status(self, pid: int) -> int | None:
        return self._ask({"op": "status", "pid": pid})["code"]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def stop_processes(procs) -> None:
    """Stop conductor processes: SIGCONT (a test may have frozen one), SIGTERM, then kill."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
