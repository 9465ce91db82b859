"""This thread's CPU over repeated calls of one function (to the nanosecond, unlike
/proc's process ticks): the benches that time one read in-process."""

from __future__ import annotations

import time
from collections.abc import Callable


def runs(fn: Callable[[], object], repeat: int) -> list[float]:
    """Seconds of this thread's CPU for each of ``repeat`` calls of ``fn``, after one
    call not counted (its imports and statement compilations)."""
    fn()
    times = []
    for _ in range(repeat):
        cpu = time.thread_time()
        fn()
        times.append(time.thread_time() - cpu)
    return times
