"""Keeping one process's threads on one CPU (Linux).

The threads of a CPython process run Python one at a time: whichever holds
the interpreter lock. When they are spread over several CPUs, every hand-over
of the lock (a boot's thread sending its build, the engine taking the next
completion) wakes a thread on another CPU, which waits to be scheduled there
while the CPU that let go idles, and the lock's data and the thread's work
move between caches. ``fleetflow serve`` hands the lock over thousands of
times a second while a large reservation builds, and its agent processes
need the other CPUs meanwhile. Kept on one CPU, a 1,000-instance reservation
took about a fifth less CPU and its builds reached their hosts within 0.3 s
instead of 0.45 s (``bench/RESULTS.md``).
What is lost is only the little that runs outside the lock at the same time
as Python in another thread (SQLite statements, socket calls).
"""

from __future__ import annotations

import contextlib
import os


def _thread_ids() -> set[int]:
    try:
        return {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:
        return {0}  # 0: the calling thread


def pin_threads_to_one_cpu() -> int | None:
    """Keep every thread of this process on one of the CPUs it may use; returns it.

    Threads started later inherit it from the thread that starts them; child
    processes already started keep their own CPUs. None (nothing changed)
    without ``sched_setaffinity`` or with a single CPU to use. Of several
    processes doing this on one machine, each takes the CPU its pid picks.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    cpu = allowed[os.getpid() % len(allowed)]
    pinned: set[int] = set()
    # Again until no thread appears that a thread not yet pinned started meanwhile.
    while True:
        todo = _thread_ids() - pinned
        if not todo:
            return cpu
        for tid in todo:
            with contextlib.suppress(OSError):  # a thread that has ended
                os.sched_setaffinity(tid, {cpu})
        pinned |= todo
