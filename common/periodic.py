"""A pass every so often on a daemon thread: the reconciler, the queue's admitter, the
recovery monitor and the cloud sync of every serve and conductor process.

Each runs :meth:`Periodic.tick` every ``interval`` seconds (and at once when
woken) until stopped. A tick that raises is logged and the next one tries
again: every pass these threads make reads the world afresh, so a database or
a cloud away for a moment costs one pass, not the thread.
"""

from __future__ import annotations

import logging
import threading

LOG = logging.getLogger(__name__)


class Periodic:
    """``tick()`` every ``interval`` seconds on a daemon thread named ``name``."""

    def __init__(self, name: str, interval: float):
        self.name = name
        self.interval = float(interval)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def wait_seconds(self) -> float:
        """How long to wait before the next pass (``interval`` unless a subclass knows better)."""
        return self.interval

    def tick(self, woken: bool) -> None:
        """One pass; ``woken``: :meth:`wake` asked for it before the interval ran out."""
        raise NotImplementedError

    def start(self):
        """Start the thread (nothing when ``interval`` is 0: the pass is turned off)."""
        if self.interval > 0 and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, daemon=True, name=self.name)
            self._thread.start()
        return self

    def wake(self) -> None:
        """Run a pass now rather than at the end of the interval."""
        self._wake.set()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self.wait_seconds())
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.tick(woken)
            except Exception:
                LOG.warning("%s: pass failed; the next one tries again", self.name,
                            exc_info=True)
