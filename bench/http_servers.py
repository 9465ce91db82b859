"""The two placement servers of ``placement_claims.py --http``, each in processes of its own.

- :class:`FleetflowServe`: ``fleetflow serve`` on a scratch state directory
  (a one-host fleet, so that its agents stay idle), ``/placement`` on it.
- :class:`RealPlacement`: OpenStack Placement :data:`PLACEMENT_VERSION`, installed
  with gunicorn in a virtualenv of its own (made once, then reused), its
  ``placement.wsgi.api:application`` served by gunicorn, ``noauth2``, its
  schema made by ``placement-manage db sync``.

Both answer ``X-Auth-Token: admin`` (Placement's noauth2 convention) as admin.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import requests

PLACEMENT_VERSION = "16.0.0"
# Placement reads inserted ids from the DB-API cursor's lastrowid, which psycopg 3
# lacks: it reaches PostgreSQL through psycopg2 (pg_url_for_placement).
PLACEMENT_PACKAGES = [f"openstack-placement=={PLACEMENT_VERSION}", "gunicorn>=22.0",
                      "psycopg2-binary>=2.9"]

ONE_HOST_FLEET = """\
profiles:
  small: {inventory: {VCPU: {total: 8}, MEMORY_MB: {total: 16384}, DISK_GB: {total: 100}}}
regions:
  - name: bench
    zones: [{name: z1, racks: [{name: r1, hosts: 1, profile: small}]}]
flavors: [{id: "1", name: m1.small, vcpus: 1, ram_mb: 512, disk_gb: 1}]
images: [{id: 8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01, name: cirros}]
"""


def default_venv() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "fleetflow-bench", f"placement-{PLACEMENT_VERSION}")


def ensure_venv(path: str) -> str:
    """The virtualenv of OpenStack Placement at ``path``, made now if missing."""
    marker = os.path.join(path, ".fleetflow-bench-packages")
    wanted = "\n".join(PLACEMENT_PACKAGES)
    if not os.path.exists(marker) or open(marker).read() != wanted:
        print(f"installing openstack-placement {PLACEMENT_VERSION} in {path} ...",
              file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", path], check=True)
        pip = subprocess.run([os.path.join(path, "bin", "pip"), "install", "-q",
                              *PLACEMENT_PACKAGES], capture_output=True, text=True)
        if pip.returncode:
            raise RuntimeError(f"pip install failed: {pip.stderr[-3000:]}")
        with open(marker, "w") as f:
            f.write(wanted)
    return path


def pg_url_for_placement(url: str) -> str:
    """The same database through psycopg2, the driver Placement works with."""
    scheme, rest = url.split("://", 1)
    return f"postgresql+psycopg2://{rest}" if scheme.startswith("postgresql") else url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Process:
    name = "server"

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.port = free_port()
        self.proc = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    prefix = ""

    def _spawn(self, args: list[str], env: dict) -> None:
        log = open(os.path.join(self.workdir, f"{self.name}.log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(args, env=env, cwd=self.workdir, stdout=log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while True:
            try:
                requests.get(self.root + "/", timeout=60)
                return
            except requests.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{self.name} did not start: {self.log()}") from None
                time.sleep(0.2)

    def log(self) -> str:
        with open(os.path.join(self.workdir, f"{self.name}.log")) as f:
            return f.read()[-3000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class FleetflowServe(_Process):
    name = "fleetflow"
    prefix = "/placement"

    def __init__(self, workdir: str, db_url: str | None):
        super().__init__(workdir)
        self.db_url = db_url

    def start(self) -> FleetflowServe:
        fleet = os.path.join(self.workdir, "fleet.yaml")
        with open(fleet, "w") as f:
            f.write(ONE_HOST_FLEET)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFLOW_")}
        env.update(FLEETFLOW_API_PORT=str(self.port), FLEETFLOW_FLEET_FILE=fleet,
                   FLEETFLOW_API_POLICY_FILE=os.path.join(self.workdir, "policy.yaml"))
        if self.db_url:
            env["FLEETFLOW_DATABASE_CONNECTION"] = self.db_url
        self._spawn([sys.executable, "-m", "fleetflow.cli.main", "serve", "--state-dir",
                     os.path.join(self.workdir, "state")], env)
        return self


class RealPlacement(_Process):
    name = "placement"

    def __init__(self, workdir: str, venv: str, db_url: str, workers: int, threads: int):
        super().__init__(workdir)
        self.venv, self.db_url = venv, db_url
        self.workers, self.threads = workers, threads

    def start(self) -> RealPlacement:
        with open(os.path.join(self.workdir, "placement.conf"), "w") as f:
            f.write(f"[api]\nauth_strategy = noauth2\n\n[placement_database]\n"
                    f"connection = {pg_url_for_placement(self.db_url)}\n")
        env = dict(os.environ, OS_PLACEMENT_CONFIG_DIR=self.workdir)
        bin_dir = os.path.join(self.venv, "bin")
        subprocess.run([os.path.join(bin_dir, "placement-manage"), "--config-dir",
                        self.workdir, "db", "sync"], env=env, cwd=self.workdir,
                       check=True, capture_output=True)
        # gthread, even with one thread: gunicorn's sync worker closes every
        # connection after one request, and the clients keep theirs alive.
        self._spawn([os.path.join(bin_dir, "gunicorn"), "--worker-class", "gthread",
                     "--workers", str(self.workers),
                     "--threads", str(self.threads), "--bind", f"127.0.0.1:{self.port}",
                     "placement.wsgi.api:application"], env)
        return self
