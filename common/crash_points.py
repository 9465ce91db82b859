"""Crash points: where ``FLEETFLOW_CRASH_AT`` kills a process, for the crash tests.

flows/tasks/base.py says what each point means and where it fires; the names
and the kill live here, in the lowest layer, because the persistence layer
fires ``after-commit`` itself (persistence/intents.py) and must not import
the flows.
"""

from __future__ import annotations

import logging
import os
import signal

LOG = logging.getLogger(__name__)

CRASH_ENV = "FLEETFLOW_CRASH_AT"
BEFORE_EXECUTE = "before-execute"
AFTER_EFFECT = "after-effect"
AFTER_CHECKPOINT = "after-checkpoint"
DURING_REVERT = "during-revert"
AFTER_COMMIT = "after-commit"
# Inside an admission pass's transaction, once a queued request's rows and
# intent are written and before they commit (services/queue/admission.py;
# its atom name is ``queue-admission``).
DURING_ADMISSION = "during-admission"
# Inside a task that builds a group of instances (flows/provision/batch.py)
# or moves a group of servers (flows/evacuate/batch.py), at the first member to
# get there: its claim held and recorded, its build (or move) not sent; built,
# ACTIVE not written; moved, not confirmed; a failed try undone (guest
# destroyed and claim released; a move undone and the source given back), its
# row still naming the host.
MEMBER_CLAIMED = "member-claimed"
MEMBER_BUILT = "member-built"
MEMBER_MOVED = "member-moved"
MEMBER_UNDONE = "member-undone"
# Inside a task that deletes a group of instances (flows/provision/teardown_tasks.py):
# every member's guest destroyed, no claim released, no row DELETED yet.
MEMBERS_DESTROYED = "members-destroyed"
CRASH_POINTS = (BEFORE_EXECUTE, AFTER_EFFECT, AFTER_CHECKPOINT, DURING_REVERT, AFTER_COMMIT,
                DURING_ADMISSION, MEMBER_CLAIMED, MEMBER_BUILT, MEMBER_MOVED, MEMBER_UNDONE,
                MEMBERS_DESTROYED)


def crash_targets(environ=None) -> set[tuple[str, str]]:
    """The (atom name, point) pairs named by FLEETFLOW_CRASH_AT."""
    raw = (os.environ if environ is None else environ).get(CRASH_ENV, "")
    targets = set()
    for item in filter(None, (part.strip() for part in raw.split(","))):
        atom, _, point = item.rpartition(":")
        if not atom or point not in CRASH_POINTS:
            raise ValueError(f"{CRASH_ENV}: {item!r} is not '<atom name>:<point>' with "
                             f"a point among {', '.join(CRASH_POINTS)}")
        targets.add((atom, point))
    return targets


def maybe_crash(atom_name: str, point: str) -> None:
    """SIGKILL this process if FLEETFLOW_CRASH_AT names (atom_name, point)."""
    if CRASH_ENV not in os.environ:
        return
    if (atom_name, point) in crash_targets():
        LOG.warning("crash point %s:%s reached: killing process %d", atom_name, point,
                    os.getpid())
        # SIGKILL, not an exception: nothing may run after this line, not even
        # finally blocks or atexit handlers — that is what a crash looks like.
        os.kill(os.getpid(), signal.SIGKILL)
