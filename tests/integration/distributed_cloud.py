"""A distributed cloud for the integration tests: every part a separate process.

PostgreSQL holds the state, Redis the jobboard, RabbitMQ carries compute RPC:
``fleetflow serve`` (API only), two ``fleetflow conductor`` processes (``c1``
and ``c2``, one worker each) and one ``fleetflow compute-agent --all``, all
configured through ``FLEETFLOW_*`` environment variables. The Redis board and
the RabbitMQ topic are unique to each cloud.

Test modules import it by name, with this directory on ``sys.path``.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import yaml

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
TENANT = {"X-Project-Id": "demo", "X-Roles": "member"}


def small_fleet(racks: dict[str, int], **more) -> dict:
    """Racks ``{name: hosts}`` of 16-vCPU hosts in zone z1, with m1.small and cirros;
    ``more``: further keys of the fleet document (``rack_storage``)."""
    return {
        "profiles": {"small": {"inventory": {
            "VCPU": {"total": 16, "allocation_ratio": 1.0},
            "MEMORY_MB": {"total": 32768, "allocation_ratio": 1.0},
            "DISK_GB": {"total": 400, "allocation_ratio": 1.0}}}},
        "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
            {"name": name, "hosts": hosts, "profile": "small"}
            for name, hosts in racks.items()]}]}],
        "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048,
                     "disk_gb": 20}],
        "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
        **more,
    }


class Processes:
    def __init__(self, workdir, env):
        self.workdir, self.env, self.procs = workdir, env, {}

    def run(self, *args) -> None:
        subprocess.run(["fleetflow", *args], env=self.env, cwd=self.workdir, check=True,
                       capture_output=True, timeout=300)

    def start(self, name: str, *args) -> subprocess.Popen:
        log = open(os.path.join(self.workdir, f"{name}.log"), "w")  # noqa: SIM115
        proc = subprocess.Popen(["fleetflow", *args], env=self.env, cwd=self.workdir,
                                stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        with open(os.path.join(self.workdir, f"{name}.log")) as f:
            return f.read()[-3000:]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def start_cloud(tmp_path, fleet: dict, pg_url: str, redis_url: str, rabbit_url: str,
                port: int, wait_for_api, **settings: str) -> Processes:
    """Load ``fleet`` into the empty database ``pg_url`` and start every process.

    ``settings`` are more ``FLEETFLOW_*`` variables (they win over the
    defaults here). Returns once the API answers, with ``url`` set; the
    caller stops the processes with ``stop_all()``.
    """
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet))
    suffix = uuid.uuid4().hex[:8]
    env = dict(os.environ,
               FLEETFLOW_STATE_DIR=str(tmp_path),
               FLEETFLOW_DATABASE_CONNECTION=pg_url,
               FLEETFLOW_JOBBOARD_BACKEND="redis",
               FLEETFLOW_JOBBOARD_REDIS_URL=redis_url,
               FLEETFLOW_JOBBOARD_BOARD_NAME=f"dist-{suffix}",
               FLEETFLOW_JOBBOARD_CLAIM_EXPIRY="3",
               FLEETFLOW_JOBBOARD_KEEPALIVE_INTERVAL="0.5",
               FLEETFLOW_MESSAGING_TRANSPORT_URL=rabbit_url,
               FLEETFLOW_MESSAGING_TOPIC=f"fleetflow-compute-{suffix}",
               FLEETFLOW_MESSAGING_RPC_TIMEOUT="20",
               FLEETFLOW_COMPUTE_SIMULATE="false",
               FLEETFLOW_COMPUTE_STATE_PATH=str(tmp_path / "hosts.db"),
               FLEETFLOW_CONDUCTOR_WORKERS="0",
               FLEETFLOW_API_PORT=str(port),
               FLEETFLOW_FLEET_FILE=str(fleet_file))
    env.update(settings)
    env.pop("FLEETFLOW_CRASH_AT", None)
    procs = Processes(str(tmp_path), env)
    try:
        procs.run("db", "upgrade")
        procs.run("fleet", "load", str(fleet_file))
        procs.start("agent", "compute-agent", "--all")
        procs.start("c1", "conductor", "--name", "c1")
        procs.start("c2", "conductor", "--name", "c2")
        procs.start("api", "serve")
        url = f"http://127.0.0.1:{port}"
        wait_for_api(url, alive=lambda: procs.procs["api"].poll() is None,
                     on_timeout=lambda: procs.log("api"))
    except BaseException:
        procs.stop_all()
        raise
    procs.url = url
    return procs


def board(env):
    """A connected client of the cloud's Redis jobboard (close it when done)."""
    from fleetflow.common import config
    from fleetflow.engine.backend import get_backend
    from fleetflow.engine.jobboard.boards import make_jobboard

    conf = config.load(args=[], environ=env)
    return make_jobboard(conf, get_backend(conf))


def owner(jobboard, flow_id: str) -> str | None:
    """Who holds the claim of the job of ``flow_id``; None: unclaimed, or consumed."""
    for job in jobboard.iterjobs(only_unclaimed=False, ensure_fresh=True):
        if job.name == flow_id:
            return jobboard.find_owner(job)
    return None
