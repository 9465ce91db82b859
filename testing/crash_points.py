"""fleetflow's crash points, made to record or to stop a flow in the test's process.

Outside tests a crash point kills its process (``common/crash_points.py``).
Here, once armed through the ``fleetflow_crash_points`` fixture, a point is
only recorded as reached, or, armed with ``stop=True``, it raises
:class:`CrashPointReached` in the atom, which ends the engine's run where a
crash would have: what the flow had saved stays in the cloud's logbook for
:meth:`fleetflow.testing.FakeCloud.resume`.
"""

from __future__ import annotations


class CrashPointReached(BaseException):
    """Raised at a crash point armed with ``stop=True``.

    A ``BaseException``, as ``KeyboardInterrupt`` is: TaskFlow records an
    ``Exception`` raised by an atom as the atom's failure and reverts the
    flow, while this one goes through the engine untouched and stops it.
    """

    def __init__(self, atom_name: str, point: str):
        super().__init__(f"crash point {atom_name}:{point} reached")
        self.atom_name = atom_name
        self.point = point


class CrashPoints:
    """Crash points armed for one test; :attr:`reached` lists those hit, in order."""

    def __init__(self, monkeypatch):
        self._monkeypatch = monkeypatch
        self._armed: list[str] = []
        self._stops: set[tuple[str, str]] = set()
        self.reached: list[tuple[str, str]] = []

    def arm(self, atom_name: str, point: str, stop: bool = False) -> None:
        """Make ``point`` (``before-execute``, ``after-effect`` ...) of ``atom_name`` fire.

        ``stop``: the first time the point is reached, the flow's run stops
        there (:class:`CrashPointReached`) and the point is disarmed, as the
        resumed run of a crash test no longer crashes.
        """
        from fleetflow.common import crash_points

        if point not in crash_points.CRASH_POINTS:
            raise ValueError(f"{point!r} is not among {', '.join(crash_points.CRASH_POINTS)}")
        self._armed.append(f"{atom_name}:{point}")
        if stop:
            self._stops.add((atom_name, point))
        self._set_env()

    def _set_env(self) -> None:
        from fleetflow.common import crash_points

        self._monkeypatch.setenv(crash_points.CRASH_ENV, ",".join(self._armed))

    def _record(self, atom_name: str, point: str) -> None:
        from fleetflow.common import crash_points

        if (atom_name, point) not in crash_points.crash_targets():
            return
        self.reached.append((atom_name, point))
        if (atom_name, point) in self._stops:
            self._stops.discard((atom_name, point))
            self._armed.remove(f"{atom_name}:{point}")
            self._set_env()
            raise CrashPointReached(atom_name, point)
