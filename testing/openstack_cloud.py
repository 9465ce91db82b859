"""A real Nova and Placement on loopback ports, for tests: run it as a program.

    python -m fleetflow.testing.openstack_cloud --hosts 10 --clouds-yaml clouds.yaml \\
        --cloud-name harness [--log-file nova.log]

It runs Nova's own functional harness (``fleetflow.testing.nova_harness``): the real
nova-api, conductor, scheduler and ``--hosts`` computes on Nova's fake virt driver, named
``host000``, ``host001``..., and the real Placement, in this one process. It writes the
cloud into the clouds.yaml (merged into the file when it exists) so a stock
``openstack.connect(cloud=NAME)`` reaches it, prints one line on stdout,
``READY <compute-url> <placement-url>``, and serves until SIGTERM or SIGINT, then exits 0.

Identity: a request's ``X-Auth-Token`` is ``user:project`` (``admin:admin`` is an admin);
Placement takes any token. ``<compute-url>/identity/v3`` issues such tokens as Keystone
issues its own (``fleetflow.testing.harness_identity``): the clouds.yaml entry holds
user ``admin``'s password, scoped to project ``admin``, and a client may scope it to
any other project. The compute URL is the API's root (``/v2.1`` is under it).
Under ``<compute-url>/_harness/`` the harness answers itself, to play a dead host:
``POST hosts/<host>/stop`` (its nova-compute stops: no RPC, no heartbeat, and
``os-services`` reads it ``down`` within seconds), ``POST hosts/<host>/start`` (a restarted
nova-compute, same servers), ``GET hosts`` (``{host: "up" | "stopped"}``).

Nova patches or poisons eventlet when it is imported: nothing in a fleetflow process may
import this module's harness; only this program's ``main`` does.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import threading
import time

import yaml

LOG = logging.getLogger("fleetflow.testing.openstack_cloud")
REGION = "RegionOne"
#: Seconds the harness's own clean-up may take after a stop signal before it is cut short.
CLEANUP_SECONDS = 15
#: The exit status when Nova's harness cannot be imported (not installed, or a test-only
#: package of it missing): a test run skips on it, where any other failure is an error.
EXIT_NO_NOVA = 3


def host_names(count: int) -> list[str]:
    return [f"host{index:03d}" for index in range(count)]


def cloud_entry(compute_url: str, placement_url: str) -> dict:
    """The clouds.yaml entry of a harness serving at these URLs: a password, as a
    service user of a real cloud has, so a client can scope itself to any project."""
    from fleetflow.testing import harness_identity

    compute_endpoint = compute_url.rstrip("/") + "/v2.1"
    return {
        "auth_type": "v3password",
        "auth": {"auth_url": compute_url.rstrip("/") + harness_identity.PREFIX,
                 "username": harness_identity.USER, "password": harness_identity.PASSWORD,
                 "project_id": "admin", "user_domain_id": "default",
                 "project_domain_id": "default"},
        "compute_endpoint_override": compute_endpoint,
        "placement_endpoint_override": placement_url.rstrip("/") + "/",
        "region_name": REGION,
    }


def write_clouds_yaml(path: str, cloud_name: str, entry: dict) -> None:
    """Put ``entry`` under ``clouds: cloud_name:`` in ``path``, keeping its other clouds."""
    document: dict = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as existing:
            document = yaml.safe_load(existing) or {}
    document.setdefault("clouds", {})[cloud_name] = entry
    # Written aside and renamed, so a reader never sees half a file.
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "w", encoding="utf-8") as out:
        yaml.safe_dump(document, out, default_flow_style=False, sort_keys=False)
    os.replace(partial, path)


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m fleetflow.testing.openstack_cloud",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=4, help="compute hosts (host000...)")
    parser.add_argument("--clouds-yaml", required=True, help="clouds.yaml to write (merged)")
    parser.add_argument("--cloud-name", required=True, help="the cloud's name in it")
    parser.add_argument("--log-file", help="Nova's and the harness's log (default: stderr)")
    args = parser.parse_args(argv)
    if not 1 <= args.hosts <= 999:
        parser.error("--hosts must be between 1 and 999")
    return args


def _log_handler(log_file):
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s [%(name)s] %(message)s"))
    handler.setLevel(logging.INFO)
    return handler


def _exit_now(code: int) -> None:
    # NOTE: os._exit, not sys.exit: Nova's services leave non-daemon threads (RPC
    # servers, timers) that would keep the interpreter waiting at its exit.
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)


def main(argv=None) -> int:
    args = _parse(argv)
    # stdout carries the READY line only: whatever Nova or a library prints goes to stderr.
    ready_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    handler = _log_handler(args.log_file)
    # ``kill -USR1 <pid>`` writes every thread's stack to stderr: how a hung request is read.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)

    stop_requested = threading.Event()
    ready = threading.Event()

    def on_signal(signum, _frame):
        if stop_requested.is_set():
            _exit_now(0)
        LOG.info("signal %s: stopping", signum)
        stop_requested.set()
        # The clean-up of Nova's fixtures is a courtesy (temporary files): bounded.
        watchdog = threading.Timer(CLEANUP_SECONDS, _exit_now, args=(0 if ready.is_set() else 1,))
        watchdog.daemon = True
        watchdog.start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()

    def on_ready(compute_url, placement_url):
        write_clouds_yaml(args.clouds_yaml, args.cloud_name,
                          cloud_entry(compute_url, placement_url))
        ready_out.write(f"READY {compute_url} {placement_url}\n")
        ready_out.flush()
        ready.set()
        LOG.info("ready after %.1f s: %d hosts, compute %s, placement %s",
                 time.monotonic() - started, args.hosts, compute_url, placement_url)

    # NOTE: Nova's native-threading mode: the HTTP servers' threads, the heartbeats and
    # the signal handler are plain threads, and no library is monkey-patched.
    os.environ.setdefault("OS_NOVA_DISABLE_EVENTLET_PATCHING", "1")
    try:
        from fleetflow.testing import nova_harness
    except ImportError as error:
        LOG.error("Nova's functional harness cannot be imported: %s", error)
        _exit_now(EXIT_NO_NOVA)
    succeeded = nova_harness.serve(host_names(args.hosts), on_ready, stop_requested, handler)
    if not ready.is_set():
        LOG.error("the harness stopped before it was ready")
        _exit_now(1)
    _exit_now(0 if succeeded or stop_requested.is_set() else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
