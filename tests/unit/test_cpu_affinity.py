"""Keeping a process's threads on one CPU: every thread, before and after, and no child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs sched_setaffinity and at least two CPUs to choose from")

# Run in a child: pinning the test process would pin every later test with it.
CHILD = textwrap.dedent("""
    import json, os, subprocess, sys, threading
    from fleetflow.common import cpu_affinity

    started = threading.Event()
    stop = threading.Event()
    def wait():
        started.set()
        stop.wait()
    before = threading.Thread(target=wait)
    before.start()
    started.wait()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    cpu = cpu_affinity.pin_threads_to_one_cpu()
    after = threading.Thread(target=stop.wait)
    after.start()
    threads = {tid: sorted(os.sched_getaffinity(int(tid)))
               for tid in os.listdir("/proc/self/task")}
    print(json.dumps({"cpu": cpu, "threads": threads,
                      "child": sorted(os.sched_getaffinity(child.pid))}))
    stop.set()
    child.communicate(b"")
""")


def test_every_thread_is_kept_on_the_chosen_cpu_and_children_are_not():
    allowed = sorted(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["cpu"] in allowed
    assert len(seen["threads"]) >= 3  # main, one started before, one started after
    assert all(cpus == [seen["cpu"]] for cpus in seen["threads"].values()), seen
    assert seen["child"] == allowed
