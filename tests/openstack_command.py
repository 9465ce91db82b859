"""Run the ``openstack`` command many times, each in a process of its own, without
paying for its imports each time.

Starting python-openstackclient imports keystoneauth, openstacksdk, cliff and every
plugin: over a second of CPU per command, most of what a test of ``openstack fleet ...``
or osc-placement spends. :class:`OpenstackCommand` starts one interpreter that imports
all of that once, then forks a child per command. Each child is a real process running
openstackclient's own ``main(argv)`` (what the ``openstack`` script calls) with the
command's environment, its own stdout and stderr, and its exit status; nothing of one
command is seen by the next. One test still runs the installed ``openstack`` script
itself (``tests/functional/test_osc_plugin.py``), which is what users run.

Protocol: one JSON line per command on the server's stdin
(``{"args", "env", "timeout"}``), one JSON reply on its stdout
(``{"code", "stdout", "stderr"}``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

#: Imported once by the server, before any fork: the client, its libraries and the
#: plugins the tests use (the commands' modules are loaded on first use otherwise).
PRELOAD = (
    "openstackclient.shell", "openstackclient.common.clientmanager", "osc_lib.shell",
    "keystoneauth1.loading", "keystoneauth1.identity.generic", "openstack.connection",
    "cliff.app", "cliff.commandmanager", "cliff.formatters.json_format",
    "cliff.formatters.table", "osc_placement.plugin", "osc_placement.resources.resource_provider",
    "osc_placement.resources.allocation", "osc_placement.resources.inventory",
    "osc_placement.resources.trait", "osc_placement.resources.aggregate",
    "osc_placement.resources.usage", "osc_placement.resources.resource_class",
    "fleetflow.osc.plugin", "fleetflow.osc.help", "fleetflow.osc.flows",
    "fleetflow.osc.reservations", "fleetflow.osc.vclusters", "fleetflow.osc.groups",
    "fleetflow.osc.recoveries", "fleetflow.osc.admin",
)
#: Entry point groups openstackclient reads while it starts (stevedore caches them).
ENTRY_POINTS = ("openstack.cli.extension", "openstack.cli.base", "openstack.common",
                "openstack.placement.v1", "openstack.fleet.v1",
                "keystoneauth1.plugin", "cliff.formatter.list", "cliff.formatter.show")


def installed_script() -> str | None:
    """The ``openstack`` script beside this interpreter (or on PATH), if installed."""
    beside = os.path.join(os.path.dirname(sys.executable), "openstack")
    return beside if os.path.exists(beside) else shutil.which("openstack")


@dataclasses.dataclass
class Completed:
    """What one command did, as ``subprocess.run`` reports it."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def serve() -> None:
    """The server's main loop (runs in its own interpreter)."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    with contextlib.suppress(ImportError, AttributeError):
        from stevedore import _cache

        for group in ENTRY_POINTS:
            _cache.get_group_all(group)
    for line in sys.stdin:
        request = json.loads(line)
        replies.write(json.dumps(_run_forked(request)) + "\n")


def _run_forked(request: dict) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        out, err = os.path.join(scratch, "out"), os.path.join(scratch, "err")
        pid = os.fork()
        if pid == 0:
            _child(request, out, err)
        deadline = time.monotonic() + request.get("timeout", 120)
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = None
                break
            time.sleep(0.01)
        with open(out, errors="replace") as fh_out, open(err, errors="replace") as fh_err:
            reply = {"stdout": fh_out.read(), "stderr": fh_err.read()}
    if status is None:
        reply["code"] = None
    else:
        reply["code"] = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                         else os.WEXITSTATUS(status))
    return reply


def _child(request: dict, out: str, err: str) -> None:
    code = 1
    try:
        for fd, path in ((1, out), (2, err)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the child's own stdout
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["openstack", *request["args"]]
        from openstackclient.shell import main

        code = main(request["args"])
        code = code if isinstance(code, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class OpenstackCommand:
    """Client of the server: ``run(args, env=..., timeout=...)`` -> :class:`Completed`."""

    def __init__(self):
        # tests/ goes last on the path: its openstack/ folder must not hide openstacksdk.
        here = os.path.dirname(os.path.abspath(__file__))
        source = (f"import sys; sys.path.append({here!r}); "
                  "import openstack_command; openstack_command.serve()")
        self._proc = subprocess.Popen([sys.executable, "-c", source],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._lock = threading.Lock()

    def run(self, args: list[str], env: dict[str, str] | None = None,
            timeout: float = 120) -> Completed:
        request = {"args": list(args), "env": dict(os.environ if env is None else env),
                   "timeout": timeout}
        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the openstack command server died")
        reply = json.loads(line)
        if reply["code"] is None:
            raise subprocess.TimeoutExpired(["openstack", *args], timeout)
        return Completed(list(args), reply["code"], reply["stdout"], reply["stderr"])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
