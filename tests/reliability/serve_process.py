"""A real ``fleetflow serve`` over one state directory: started, killed, restarted.

Each run appends its output to ``serve.log`` in the state directory. The
process leads a session of its own, so :meth:`ServeProcess.kill` reaches its
agent processes too, as ``kill -9`` of a terminal's process group would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import requests

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
TENANT = {"X-Project-Id": "demo", "X-Roles": "member"}
UNFINISHED = ("PENDING", "SCHEDULING", "BUILDING", "REVERTING")
FLEETFLOW = os.path.join(os.path.dirname(sys.executable), "fleetflow")


class ServeProcess:
    """``fleetflow serve`` on ``port`` with ``workdir`` as its state directory.

    ``settings`` (FLEETFLOW_* variables) apply to every run; :meth:`start`
    takes more for one run.
    """

    def __init__(self, workdir, port: int, wait_for_api, hosts: int = 4, **settings: str):
        self.workdir, self.port, self.wait_for_api = str(workdir), port, wait_for_api
        self.url = f"http://127.0.0.1:{port}"
        self.fleet = os.path.join(self.workdir, "fleet.yaml")
        self.settings = settings
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        subprocess.run([FLEETFLOW, "fleet", "generate", "--hosts", str(hosts),
                        "--hosts-per-rack", str(hosts), "-o", self.fleet],
                       check=True, capture_output=True, timeout=120)

    def env(self, **settings: str) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFLOW_")}
        env.update(FLEETFLOW_STATE_DIR=self.workdir,
                   FLEETFLOW_DATABASE_CONNECTION=f"sqlite:///{self.db_path}",
                   FLEETFLOW_API_PORT=str(self.port),
                   FLEETFLOW_FLEET_FILE=self.fleet)
        env.update(self.settings)
        env.update(settings)
        return env

    @property
    def db_path(self) -> str:
        return os.path.join(self.workdir, "fleetflow.db")

    @property
    def log_path(self) -> str:
        return os.path.join(self.workdir, "serve.log")

    def start(self, wait: bool = True, **settings: str) -> None:
        self.runs += 1
        with open(self.log_path, "a") as log:
            log.write(f"=== run {self.runs} ===\n")
            log.flush()
            self.proc = subprocess.Popen([FLEETFLOW, "serve"], cwd=self.workdir,
                                         env=self.env(**settings), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        self.wait_for_api(self.url, alive=lambda: self.proc.poll() is None,
                          on_timeout=self.log)

    def log(self, tail: int = 4000) -> str:
        with open(self.log_path) as f:
            return f.read()[-tail:]

    def kill(self) -> None:
        """SIGKILL to serve and every process of its session (its agents)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def reservation(self, reservation_id: str) -> dict:
        return requests.get(f"{self.url}/v2/demo/reservations/{reservation_id}",
                            headers=TENANT, timeout=30).json()["reservation"]

    def wait_settled(self, reservation_id: str, timeout: float,
                     waiting: tuple[str, ...] = ()) -> dict:
        """The reservation once it left every transitional status, and ``waiting`` ones
        (``QUEUED``), or fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            body = self.reservation(reservation_id)
            if body["status"] not in UNFINISHED + waiting:
                return body
            assert time.monotonic() < deadline, (body["status"], body["progress"], self.log())
            time.sleep(0.2)
