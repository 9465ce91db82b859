"""fleetflow against Nova's own ways, on one real Nova (Nova's functional harness).

One run starts ONE harness of ``--hosts`` computes (``python -m
fleetflow.testing.openstack_cloud``: nova-api, conductor, scheduler, the computes on Nova's
``MediumFakeDriver`` and the real Placement, in a process of their own) and times, on it:

1. ``live`` then ``cold``: 40 servers (``bench.tiny``: 1 VCPU, 64 MB, 1 GB) off ``host000``.
   - fleetflow: a fresh ``fleetflow serve`` in openstack mode boots the 40 through its own
     API with every other host in ``maintenance`` (which disables their Nova services), puts
     them back ``up``, then ``POST /v2/admin/evacuations {"hosts": ["host000"], "mode": M}``;
     timed from the POST to the poll that sees the evacuation settled.
   - Nova: the 40 are booted again in Nova (one multi-create with ``host``), ``host000``'s
     service disabled as an operator does first, then exactly what python-novaclient's
     ``nova host-evacuate-live host000`` sends (one ``os-migrateLive`` per server, host
     None, ``block_migration: auto``, one after another, without waiting) or ``nova
     host-servers-migrate host000`` (one ``migrate`` per server, the same way), each server
     then confirmed (``confirmResize``) as soon as it reads VERIFY_RESIZE, as an operator
     runs ``nova resize-confirm``; timed from the first POST to every server settled.
2. a reservation of ``--count`` m1.tiny: fleetflow's ``POST /v2/demo/reservations`` to ACTIVE
   against one Nova multi-create (``min_count = max_count``) to every server ACTIVE.

Between cases every server is deleted and every compute service enabled. It prints one
row per case: both times, their ratio, and the hosts each left servers on (from Nova).

    python bench/openstack.py --hosts 10
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import requests

NOVA_VERSION = "2.94"
ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
TENANT = {"X-Project-Id": "demo", "X-Roles": "member"}
IMAGE = "155d900f-4e14-4e4c-a73d-069cbf4541e6"  # in every harness cloud's Glance
#: 40 of m1.tiny (512 MB) do not fit a MediumFakeDriver host (8 GB, 512 MB reserved);
#: 40 of these do: 40 VCPU is its 10 VCPU at Nova's 4.0 allocation ratio.
SMALL_FLAVOR = {"name": "bench.tiny", "vcpus": 1, "ram": 64, "disk": 1}
SOURCE = "host000"
FILL_BATCH = 10
UNFINISHED = ("PENDING", "SCHEDULING", "BUILDING", "REVERTING", "RUNNING")


class Nova:
    """The harness's compute API, as an administrator (its token is ``user:project``)."""

    def __init__(self, compute_url: str):
        self.base = compute_url.rstrip("/") + "/v2.1"
        self.session = requests.Session()
        self.session.headers.update({"X-Auth-Token": "admin:admin",
                                     "OpenStack-API-Version": f"compute {NOVA_VERSION}"})

    def call(self, method: str, path: str, **kwargs):
        answer = self.session.request(method, self.base + path, timeout=300, **kwargs)
        if answer.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text[:500]}")
        return answer.json() if answer.content else None

    def servers(self) -> list[dict]:
        return self.call("GET", "/servers/detail?all_tenants=1&limit=1000")["servers"]

    def ensure_flavor(self, flavor: dict) -> None:
        names = {f["name"] for f in self.call("GET", "/flavors")["flavors"]}
        if flavor["name"] not in names:
            self.call("POST", "/flavors", json={"flavor": flavor})

    def boot(self, count: int, flavor: str, host: str | None = None) -> None:
        server = {"name": "nova-bench", "imageRef": IMAGE, "flavorRef": flavor,
                  "networks": "none", "min_count": count, "max_count": count}
        if host:
            server["host"] = host
        self.call("POST", "/servers", json={"server": server})

    def flavor_id(self, name: str) -> str:
        return next(f["id"] for f in self.call("GET", "/flavors")["flavors"]
                    if f["name"] == name)

    def set_service(self, host: str, enabled: bool) -> None:
        for service in self.call("GET", "/os-services?binary=nova-compute")["services"]:
            if service["host"] != host:
                continue
            body = {"status": "enabled" if enabled else "disabled"}
            if enabled and service.get("forced_down"):
                body["forced_down"] = False
            if not enabled:
                body["disabled_reason"] = "bench"
            self.call("PUT", f"/os-services/{service['id']}", json=body)

    def hypervisor_servers(self, host: str) -> list[dict]:
        """novaclient's ``hypervisors.search(host, servers=True)`` at 2.53 and later."""
        found = self.call("GET", f"/os-hypervisors?hypervisor_hostname_pattern={host}"
                                 "&with_servers=True")["hypervisors"]
        return [server for hyper in found for server in hyper.get("servers", [])]

    def clean(self, hosts: list[str]) -> None:
        """No server left, every compute service enabled: each case starts the same."""
        for server in self.servers():
            self.call("DELETE", f"/servers/{server['id']}")
        wait(lambda: not self.servers(), 300, "servers deleted")
        for host in hosts:
            self.set_service(host, True)

    def wait_active(self, count: int, poll: float, timeout: float) -> list[dict]:
        def all_active():
            servers = self.servers()
            failed = [s for s in servers if s["status"] == "ERROR"]
            if failed:
                raise RuntimeError(f"{len(failed)} servers in ERROR: {failed[0].get('fault')}")
            ready = [s for s in servers if s["status"] == "ACTIVE"]
            return ready if len(ready) == count else None
        return wait(all_active, timeout, f"{count} servers ACTIVE", poll)


def wait(check, timeout: float, what: str, poll: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout} s")
        time.sleep(poll)


def hosts_of(servers: list[dict]) -> list[str]:
    return sorted({s["OS-EXT-SRV-ATTR:host"] for s in servers})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_harness(workdir: str, hosts: int) -> tuple[subprocess.Popen, str, str]:
    clouds_yaml = os.path.join(workdir, "clouds.yaml")
    command = [sys.executable, "-m", "fleetflow.testing.openstack_cloud", "--hosts",
               str(hosts), "--clouds-yaml", clouds_yaml, "--cloud-name", "bench",
               "--log-file", os.path.join(workdir, "harness.log")]
    with open(os.path.join(workdir, "harness.stderr"), "w") as stderr:
        # Nova's fixtures keep their SQLite files under TMPDIR: in the run's directory.
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr,
                                stdin=subprocess.DEVNULL, text=True, cwd=workdir,
                                env=dict(os.environ, TMPDIR=workdir))
    for line in proc.stdout:
        if line.startswith("READY "):
            _, compute_url, _placement_url = line.split()
            return proc, compute_url, clouds_yaml
    sys.exit(f"the harness exited ({proc.wait()}); see {workdir}/harness.log")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Serve:
    """A fresh ``fleetflow serve`` in openstack mode: its own state directory and port."""

    def __init__(self, workdir: str, clouds_yaml: str, nova_poll: float):
        self.workdir = tempfile.mkdtemp(prefix="serve-", dir=workdir)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEETFLOW_", "OS_"))}
        env.update(FLEETFLOW_STATE_DIR=self.workdir, FLEETFLOW_API_PORT=str(port),
                   FLEETFLOW_CLOUD_DRIVER="openstack", FLEETFLOW_OPENSTACK_CLOUD="bench",
                   FLEETFLOW_OPENSTACK_CLOUDS_YAML=clouds_yaml,
                   FLEETFLOW_OPENSTACK_POLL_INTERVAL=str(nova_poll))
        fleetflow = os.path.join(os.path.dirname(sys.executable), "fleetflow")
        with open(os.path.join(self.workdir, "serve.log"), "w") as log:
            self.proc = subprocess.Popen([fleetflow, "serve"], cwd=self.workdir, env=env,
                                         stdout=log, stderr=subprocess.STDOUT)

    def __enter__(self) -> Serve:
        def answers():
            if self.proc.poll() is not None:
                sys.exit(f"fleetflow serve exited; see {self.workdir}/serve.log")
            try:
                return requests.get(f"{self.url}/openapi.json", timeout=2).ok
            except requests.ConnectionError:
                return False
        wait(answers, 300, "fleetflow API", 0.2)
        return self

    def __exit__(self, *exc) -> None:
        stop(self.proc)

    def call(self, method: str, path: str, headers=ADMIN, **kwargs):
        answer = requests.request(method, self.url + path, headers=headers, timeout=300,
                                  **kwargs)
        if answer.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text[:500]}")
        return answer.json() if answer.content else None

    def set_state(self, host: str, state: str) -> None:
        self.call("PUT", f"/v2/admin/hosts/{host}",
                  json={"host": {"state": state, "reason": "bench"}})

    def reserve(self, count: int, flavor: str) -> str:
        body = {"reservation": {"name": "bench", "count": count, "flavor_ref": flavor,
                                "image_ref": IMAGE}}
        return self.call("POST", "/v2/demo/reservations", headers=TENANT,
                         json=body)["reservation"]["id"]

    def wait_reservation(self, reservation_id: str, poll: float) -> dict:
        def settled():
            body = self.call("GET", f"/v2/demo/reservations/{reservation_id}",
                             headers=TENANT)["reservation"]
            return None if body["status"] in UNFINISHED else body
        return wait(settled, 600, "settled reservation", poll)


def fleetflow_evacuation(nova, serve_args, hosts, mode, servers, poll,
                         max_parallel=None) -> dict:
    with Serve(*serve_args) as serve:
        others = [h for h in hosts if h != SOURCE]
        # Every other host in maintenance (its Nova service disabled) while the servers
        # boot, so fleetflow's scheduler has only the source; then back up.
        for host in others:
            serve.set_state(host, "maintenance")
        # In reservations of FILL_BATCH: 40 builds at once on one host kept the harness's
        # single process so busy that host000's heartbeat came late, Nova's ComputeFilter
        # called it down, and the builds failed (not timed: this is only the set-up).
        for batch in range(0, servers, FILL_BATCH):
            count = min(FILL_BATCH, servers - batch)
            built = serve.wait_reservation(serve.reserve(count, SMALL_FLAVOR["name"]), poll)
            if built["status"] != "ACTIVE":
                sys.exit(f"the evacuees did not build: {built['status']} "
                         f"{built.get('fault') or built.get('progress')}")
        if hosts_of(nova.servers()) != [SOURCE]:
            sys.exit(f"the evacuees are not all on {SOURCE}")
        for host in others:
            serve.set_state(host, "up")
        t0 = time.monotonic()
        request = {"hosts": [SOURCE], "mode": mode}
        if max_parallel:
            request["max_parallel"] = max_parallel
        evacuation_id = serve.call("POST", "/v2/admin/evacuations",
                                   json={"evacuation": request})["evacuation"]["id"]
        posted = time.monotonic() - t0

        def settled():
            body = serve.call("GET", f"/v2/admin/evacuations/{evacuation_id}")["evacuation"]
            return None if body["status"] in UNFINISHED else body
        body = wait(settled, 900, "settled evacuation", poll)
        total = time.monotonic() - t0
        where = nova.servers()
        return {"status": body["status"], "posted_s": posted, "total_s": total,
                "hosts": hosts_of(where),
                "left": sum(s["OS-EXT-SRV-ATTR:host"] == SOURCE for s in where)}


def nova_evacuation(nova, mode, servers, poll, timeout) -> dict:
    """``nova host-evacuate-live`` / ``nova host-servers-migrate``, as novaclient sends them."""
    nova.boot(servers, nova.flavor_id(SMALL_FLAVOR["name"]), host=SOURCE)
    nova.wait_active(servers, poll, 300)
    nova.set_service(SOURCE, False)
    action = ({"os-migrateLive": {"host": None, "block_migration": "auto"}} if mode == "live"
              else {"migrate": {}})
    t0 = time.monotonic()
    refused = []
    for server in nova.hypervisor_servers(SOURCE):
        # As novaclient: a refused server is reported ("Accepted: False") and skipped.
        try:
            nova.call("POST", f"/servers/{server['uuid']}/action", json=action)
        except RuntimeError as error:
            refused.append(str(error))
    posted = time.monotonic() - t0
    confirmed: set[str] = set()
    verified_s = None

    def settled():
        nonlocal verified_s
        current = nova.servers()
        for server in current:
            if server["status"] == "VERIFY_RESIZE" and server["id"] not in confirmed:
                nova.call("POST", f"/servers/{server['id']}/action",
                          json={"confirmResize": None})
                confirmed.add(server["id"])
        if mode == "cold" and verified_s is None and len(confirmed) == len(current):
            verified_s = time.monotonic() - t0
        busy = [s for s in current
                if s["status"] != "ACTIVE" or s["OS-EXT-STS:task_state"] is not None]
        return None if busy else current
    status = "DONE"
    try:
        where = wait(settled, timeout, "settled servers", poll)
    except TimeoutError:
        status, where = "HUNG", nova.servers()
    total = time.monotonic() - t0
    if refused:
        status = f"{len(refused)}REFUSED"
        print(f"Nova refused {len(refused)} of the {mode} moves, first: {refused[0]}")
    return {"status": status, "posted_s": posted, "total_s": total, "hosts": hosts_of(where),
            "left": sum(s["OS-EXT-SRV-ATTR:host"] == SOURCE for s in where),
            "verified_s": verified_s}


def fleetflow_reservation(nova, serve_args, count, flavor, poll) -> dict:
    with Serve(*serve_args) as serve:
        t0 = time.monotonic()
        reservation_id = serve.reserve(count, flavor)
        posted = time.monotonic() - t0
        body = serve.wait_reservation(reservation_id, poll)
        total = time.monotonic() - t0
        return {"status": body["status"], "posted_s": posted, "total_s": total,
                "hosts": hosts_of(nova.servers()), "left": 0}


def nova_reservation(nova, count, flavor, poll, timeout) -> dict:
    t0 = time.monotonic()
    nova.boot(count, nova.flavor_id(flavor))
    posted = time.monotonic() - t0
    status = "ACTIVE"
    try:
        nova.wait_active(count, poll, timeout)
    except TimeoutError:
        status = "HUNG"
    total = time.monotonic() - t0
    return {"status": status, "posted_s": posted, "total_s": total,
            "hosts": hosts_of(nova.servers()), "left": 0}


def row(case: str, ours: dict, theirs: dict) -> None:
    ratio = theirs["total_s"] / ours["total_s"] if ours["total_s"] else float("nan")
    print(f"{case:>16} {ours['status']:>8} {ours['total_s']:>12.2f} {theirs['status']:>8} "
          f"{theirs['total_s']:>8.2f} {ratio:>6.2f} {len(ours['hosts']):>9} "
          f"{len(theirs['hosts']):>7}", flush=True)
    for who, r in (("fleetflow", ours), ("nova", theirs)):
        extra = f", all VERIFY_RESIZE at {r['verified_s']:.2f} s" if r.get("verified_s") else ""
        print(f"{'':>16} {who}: POSTs answered in {r['posted_s']:.2f} s, hosts "
              f"{','.join(r['hosts'])}, left on {SOURCE}: {r['left']}{extra}", flush=True)


def run_cases(args, nova: Nova, workdir: str, clouds_yaml: str, hosts: list[str]) -> None:
    nova.ensure_flavor(SMALL_FLAVOR)
    serve_args = (workdir, clouds_yaml, args.nova_poll)
    print(f"{'case':>16} {'ff':>8} {'fleetflow s':>12} {'nova':>8} {'nova s':>8} "
          f"{'ratio':>6} {'ff hosts':>9} {'nova hosts':>7}", flush=True)
    for mode in args.modes:
        nova.clean(hosts)
        ours = fleetflow_evacuation(nova, serve_args, hosts, mode, args.servers, args.poll,
                                    args.max_parallel)
        nova.clean(hosts)
        theirs = nova_evacuation(nova, mode, args.servers, args.poll,
                                 args.nova_timeout)
        row(f"{mode}-{args.servers}", ours, theirs)
    if not args.skip_reservation:
        nova.clean(hosts)
        ours = fleetflow_reservation(nova, serve_args, args.count, args.flavor, args.poll)
        nova.clean(hosts)
        theirs = nova_reservation(nova, args.count, args.flavor, args.poll,
                                  args.nova_timeout)
        row(f"reserve-{args.count}", ours, theirs)
    nova.clean(hosts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--servers", type=int, default=40, help="servers to evacuate")
    parser.add_argument("--count", type=int, default=100, help="servers to reserve")
    parser.add_argument("--flavor", default="m1.tiny", help="the reservations' flavor")
    parser.add_argument("--modes", nargs="*", default=["live", "cold"],
                        choices=["live", "cold"])
    parser.add_argument("--skip-reservation", action="store_true")
    parser.add_argument("--max-parallel", type=int, default=None,
                        help="the evacuation's max_parallel (moves under way at once); "
                             "unset: the API's default, 8")
    parser.add_argument("--poll", type=float, default=0.25,
                        help="seconds between this program's polls of fleetflow and Nova")
    parser.add_argument("--nova-poll", type=float, default=0.5,
                        help="fleetflow's [openstack] poll_interval: how often it looks at "
                             "the servers it builds and moves (its default, 0.5)")
    parser.add_argument("--nova-timeout", type=float, default=600,
                        help="seconds Nova's way may take before it is reported HUNG")
    args = parser.parse_args()
    # A stop signal unwinds like an error: the harness is stopped, the logs kept.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    hosts = [f"host{index:03d}" for index in range(args.hosts)]
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="bench-openstack-")
    harness, compute_url, clouds_yaml = start_harness(workdir, args.hosts)
    try:
        print(f"harness of {args.hosts} hosts ready in {time.monotonic() - started:.1f} s",
              flush=True)
        run_cases(args, Nova(compute_url), workdir, clouds_yaml, hosts)
    except BaseException:
        print(f"logs kept in {workdir}", file=sys.stderr)
        raise
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    finally:
        stop(harness)
    print(f"wall time of the run: {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()

