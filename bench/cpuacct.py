"""CPU of a set of processes to the nanosecond, from the kernel's cpuacct cgroup (v1).

/proc's utime and stime count whole clock ticks (10 ms each, given to whatever
runs at the tick): an operation of 60 ms reads 50, 60 or 70. Processes moved
into a cpuacct group of their own are counted to the nanosecond, every thread
included, and the children they start afterwards too. It needs the cpuacct
hierarchy mounted and writable (root); :func:`available` says whether it is.
"""

from __future__ import annotations

import os

ROOT = "/sys/fs/cgroup/cpuacct"


def available() -> bool:
    return os.access(ROOT, os.W_OK) and os.path.exists(os.path.join(ROOT, "cpuacct.usage"))


class Group:
    """A cpuacct group of this process's own; :meth:`add` processes, read :meth:`seconds`."""

    def __init__(self, name: str):
        self.path = os.path.join(ROOT, f"{name}-{os.getpid()}")
        os.makedirs(self.path, exist_ok=True)

    def add(self, pid: int) -> None:
        """Move ``pid`` (all its threads) in; what it starts from now on is counted too."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as procs:
            procs.write(str(pid))

    def seconds(self) -> float:
        with open(os.path.join(self.path, "cpuacct.usage")) as usage:
            return int(usage.read()) / 1e9

    def close(self) -> None:
        """Remove the group once its processes have ended (left to the kernel otherwise)."""
        try:
            os.rmdir(self.path)
        except OSError:
            pass
