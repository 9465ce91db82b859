"""How often the interpreter makes the thread running Python hand its lock over.

CPython asks that thread to let go every 5 ms (``sys.getswitchinterval``) once
another thread has waited for the lock that long. A process building a
10,000-instance reservation has a thousand member threads, most of them ready
to run at any time; every request to let go then wakes one of them, which
runs a little and is made to let go in turn. On one CPU (``serve_on_one_cpu``)
that churn fed on itself in about a third of the runs: the same build took
6-9 s instead of 3.5-4.5 s, its extra time spent in the kernel switching
threads (250,000 context switches against 100,000). With 20 ms it took
3.0-3.5 s in every run (bench/RESULTS.md). A thread that waits on I/O or a
lock lets go at once whatever the interval, so what a longer one delays is
only a thread waiting behind another that computes for more than 5 ms.
"""

from __future__ import annotations

import sys


def for_service(conf) -> None:
    """Call once a service has started: ``[DEFAULT] switch_interval`` from now on."""
    sys.setswitchinterval(conf.switch_interval)
