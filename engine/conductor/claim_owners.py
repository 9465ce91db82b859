"""Claims whose owner is provably gone: taken at once instead of after their expiry.

A conductor killed with ``kill -9`` leaves its claims live until they expire
(``[jobboard] claim_expiry``), and a ``fleetflow serve`` restarted at once
would leave its reservations BUILDING that long. Expiry is the only safe
signal when the owner may merely be paused or on another machine; but when
the owner was a process of this host, writing into the same state directory,
the kernel can say whether it still exists.

Every conductor process records itself in ``<state_dir>/conductors/``: host
name, pid, the process's start time (``/proc/<pid>/stat``, so a recycled pid
is not mistaken for the owner) and its conductor names. Before its workers
start, a process looks at every live claim on the board. An owner recorded
here, on this host, whose process no longer exists (or is a zombie, or is
another process under the same pid) is dead: its claim is released
(``abandon`` on the owner's behalf, conditional on it still being the owner)
and the job is claimed at once; the new owner advances the flow's fence as
usual, so fencing is unchanged. Any other owner keeps its claim; the job
waits for it to expire, and the log says so and when.

A process that is stopped (SIGSTOP, a debugger) still exists: it is never
taken over early, which is what fencing needs (its lease may still be
trusted by its own checkpoints).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import socket
import tempfile

LOG = logging.getLogger(__name__)

RECORD_DIR = "conductors"


def process_start_time(pid: int) -> str | None:
    """The start time (clock ticks since boot) of process ``pid``; None when it
    does not exist, has exited (a zombie) or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after it.
    fields = stat[stat.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19]  # field 22 of proc(5), counted from field 3


def proc_readable() -> bool:
    """True when this system shows process start times (Linux /proc)."""
    return process_start_time(os.getpid()) is not None


class OwnerRecords:
    """The liveness records of the conductor processes of one state directory."""

    def __init__(self, state_dir: str, host: str | None = None):
        self.directory = os.path.join(state_dir, RECORD_DIR)
        self.host = host or socket.gethostname()
        self._mine: str | None = None

    def _path(self, pid: int) -> str:
        return os.path.join(self.directory, f"{self.host}-{pid}.json")

    def register(self, names: list[str]) -> None:
        """Record this process as the owner of claims made under ``names``."""
        start = process_start_time(os.getpid())
        if start is None:
            return  # no /proc: nobody could prove us dead anyway
        path = self._path(os.getpid())
        record = {"host": self.host, "pid": os.getpid(), "start_time": start,
                  "names": sorted(names)}
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".record-")
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            os.replace(tmp, path)
        except OSError as exc:
            # Only a restart's shortcut is lost: our claims then expire as usual.
            LOG.warning("cannot record this conductor process in %s (%s): after a crash "
                        "its jobs wait for their claims to expire", self.directory, exc)
            return
        self._mine = path

    def unregister(self) -> None:
        if self._mine is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._mine)
            self._mine = None

    def records(self) -> list[tuple[str, dict]]:
        """(path, record) of every readable record."""
        try:
            entries = sorted(os.listdir(self.directory))
        except OSError:
            return []
        found = []
        for entry in entries:
            if not entry.endswith(".json"):
                continue
            path = os.path.join(self.directory, entry)
            try:
                with open(path) as f:
                    record = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(record, dict):
                found.append((path, record))
        return found

    def owners(self) -> tuple[dict[str, dict], set[str]]:
        """(dead, alive): conductor names of this host's recorded processes.

        ``dead`` maps each name of a process that is gone to its record;
        ``alive`` holds the names of those that still run (the caller's own
        included). A record under the caller's pid with another start time is
        an earlier process that had the same pid: dead.
        """
        dead: dict[str, dict] = {}
        alive: set[str] = set()
        for path, record in self.records():
            if record.get("host") != self.host:
                continue
            try:
                pid = int(record["pid"])
            except (KeyError, TypeError, ValueError):
                continue
            names = [str(name) for name in record.get("names") or ()]
            if process_start_time(pid) == record.get("start_time"):
                alive.update(names)  # that very process still runs
                continue
            for name in names:
                dead[name] = dict(record, path=path)
        return dead, alive

    def forget(self, paths) -> None:
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _expires_at(job) -> dt.datetime | None:
    expires_in = getattr(job, "expires_in", None)
    if expires_in is None:
        return None
    try:
        seconds = expires_in()
    except Exception:  # noqa: BLE001 - only for the log line
        return None
    if seconds is None:
        return None
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)


def take_over_dead_claims(board, records: OwnerRecords, own_names) -> list[str]:
    """Release every live claim on ``board`` whose owner ``records`` shows dead.

    Returns the uuids of the jobs released (claimable now). Owners that may be
    alive keep their claims; each such job is logged with when it becomes
    claimable.
    """
    own = set(own_names)
    dead, alive = records.owners()
    released: list[str] = []
    try:
        jobs = list(board.iterjobs(ensure_fresh=True))
    except Exception:
        LOG.warning("could not list the jobboard to look for claims of dead conductors",
                    exc_info=True)
        return released
    for job in jobs:
        try:
            owner = board.find_owner(job)
        except Exception:  # noqa: BLE001 - the job left the board meanwhile
            continue
        if owner is None or owner in own or owner in alive:
            continue
        record = dead.get(owner)
        if record is None:
            expires = _expires_at(job)
            LOG.warning("job %s (flow %s) is claimed by %s, not a conductor of this state "
                        "directory known to be gone: it waits for that claim to expire%s",
                        job.uuid, job.name, owner,
                        f" at {expires:%H:%M:%S} UTC" if expires else "")
            continue
        try:
            board.abandon(job, owner)
        except Exception:  # noqa: BLE001 - claimed by someone else since: theirs now
            LOG.debug("claim of job %s by %s changed while releasing it", job.uuid, owner,
                      exc_info=True)
            continue
        released.append(job.uuid)
        LOG.warning("job %s (flow %s): its owner %s (pid %s on this host) is gone; its "
                    "claim is released and the job resumes now", job.uuid, job.name,
                    owner, record["pid"])
    # Records of dead processes whose claims are all handled are of no more use.
    records.forget({r["path"] for r in dead.values()})
    return released
