"""The simulated fleet of ``fleetflow serve`` in child processes.

A thousand two-second boots are a thousand RPC requests to receive, write and
answer. Served inside the serve process, that work waits for the same
interpreter lock as the engine that sends the builds; in children of their
own it runs on the machine's other cores. Each child is a ``fleetflow
compute-agent --all --shard k/n``: it serves the hosts of its shard and points
their routes (``hosts.compute_agent``) at itself, so the conductors' RPC
client reaches every host without knowing there are several agents.

The children get the serve process's whole configuration as FLEETFLOW_*
variables (overrides included), and exit when the serve process does, even
after ``kill -9``: each watches its stdin, a pipe only the parent holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time

from fleetflow.common import config

LOG = logging.getLogger(__name__)

IN_PROCESS_URL = "fake:"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
EXITING_S = 10.0
READY_LINE = "serving"


def transport_url(conf) -> str:
    """The URL the serve process and its agents share.

    ``fake:`` cannot cross processes, so it becomes the Unix-socket transport
    in ``state_dir``; a broker URL (rabbit://...) is used as it is.
    """
    url = conf.messaging.transport_url
    if url != IN_PROCESS_URL:
        return url
    return "fleetflow-ipc://" + os.path.abspath(config.state_path(conf, "rpc"))


def server_name(index: int, count: int) -> str:
    return f"{socket.gethostname()}-serve-compute-{index}of{count}"


class AgentProcesses:
    """``count`` compute agents, started together and stopped together."""

    def __init__(self, conf, count: int, url: str):
        self.conf = conf
        self.count = count
        self.url = url
        self.procs: list[subprocess.Popen] = []

    def _command(self, index: int) -> list[str]:
        return [sys.executable, "-m", "fleetflow.cli.main", "compute-agent", "--all",
                "--shard", f"{index}/{self.count}",
                "--server-name", server_name(index, self.count),
                "--transport-url", self.url, "--exit-with-parent"]

    def _metrics_port(self, index: int) -> int:
        """Agent ``index``'s metrics port: the ports after ``[metrics] port``, one each, so
        they never take one another's (0, none, when unset)."""
        port = self.conf.metrics.port
        return port + 1 + index if port else 0

    def start(self, timeout: float = START_TIMEOUT_S) -> AgentProcesses:
        """Start every agent and wait until each serves its hosts."""
        env = dict(os.environ, **config.environment_of(self.conf))
        env["FLEETFLOW_MESSAGING_TRANSPORT_URL"] = self.url
        try:
            for index in range(self.count):
                self.procs.append(subprocess.Popen(
                    self._command(index), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    env={**env, "FLEETFLOW_METRICS_PORT": str(self._metrics_port(index))},
                    text=True))
            deadline = time.monotonic() + timeout
            for index, proc in enumerate(self.procs):
                self._wait_ready(index, proc, deadline)
        except BaseException:
            self.stop()
            raise
        LOG.info("simulated fleet served by %d agent processes over %s", self.count, self.url)
        return self

    @staticmethod
    def _wait_ready(index: int, proc: subprocess.Popen, deadline: float) -> None:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(max(0.0, deadline - time.monotonic()))
        if line and line[0].strip() == READY_LINE:
            return
        # The caller stops the agent; waiting for it here could wait forever,
        # unless it closed its output (end of file): then it is exiting.
        code = proc.poll()
        if line == [""]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(EXITING_S)
        if code is not None:
            raise RuntimeError(f"compute agent {index} exited with {code} before serving "
                               "(its errors are above)")
        if line:
            said = repr(line[0].strip()) if line[0] else "nothing (closed its output)"
            raise RuntimeError(f"compute agent {index} said {said} instead of {READY_LINE!r}")
        raise RuntimeError(f"compute agent {index} did not serve within the start timeout")

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Ask every agent to stop (end of its stdin), then make sure it did."""
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                LOG.warning("compute agent %d did not stop; killing it", proc.pid)
                proc.kill()
                proc.wait()
            with contextlib.suppress(OSError):
                proc.stdout.close()
        self.procs = []
