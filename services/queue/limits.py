"""The queue fields of a request, checked the same way for every kind (docs/queue.md)."""

from __future__ import annotations

from fleetflow.common import states
from fleetflow.common.exceptions import InvalidInput


def check(conf, req) -> None:
    """``when_full``, ``priority`` and ``queue_timeout`` of ``req`` (InvalidInput naming one)."""
    if req.when_full not in states.WHEN_FULL_CHOICES:
        raise InvalidInput(f"when_full: one of {', '.join(states.WHEN_FULL_CHOICES)}",
                           field="when_full")
    if not 0 <= req.priority <= conf.queue.max_priority:
        raise InvalidInput(f"priority: between 0 and {conf.queue.max_priority}",
                           field="priority")
    if req.queue_timeout is not None and req.queue_timeout <= 0:
        raise InvalidInput("queue_timeout: a number of seconds above 0", field="queue_timeout")
