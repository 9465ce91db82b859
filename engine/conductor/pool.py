"""Conductor workers inside one process: ``fleetflow serve`` and ``fleetflow conductor``.

A pool starts ``[conductor] workers`` conductors (engine/conductor/worker.py), each on
its own thread with its own board connection, and first releases the claims a
dead process of the same state directory and host left behind
(engine/conductor/claim_owners.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fleetflow.engine.conductor import claim_owners
from fleetflow.engine.conductor.worker import FleetConductor, default_name, make_conductor

LOG = logging.getLogger(__name__)


class ConductorPool:
    """``workers`` conductor threads in one process (``fleetflow serve``).

    Each worker has its own board connection and runs one job at a time;
    names are ``<name>-<i>`` so claims and fences say which thread owns what.
    """

    def __init__(self, conf, workers: int | None = None, name: str | None = None,
                 persistence=None, engine_factory: Callable | None = None,
                 wait_timeout: float | None = None):
        self._conf = conf
        self._count = conf.conductor.workers if workers is None else int(workers)
        self._name = name or default_name(conf)
        self._persistence = persistence
        self._engine_factory = engine_factory
        self._wait_timeout = wait_timeout
        self.conductors: list[FleetConductor] = []
        self._threads: list[threading.Thread] = []
        self._owner_records: claim_owners.OwnerRecords | None = None

    def start(self) -> None:
        """Start the workers (returns at once).

        Claims left by a dead conductor process of the same state directory
        and host are released first, so the workers take those jobs now
        rather than once the claims expire (engine/conductor/claim_owners.py).
        """
        for index in range(self._count):
            self.conductors.append(make_conductor(self._conf, f"{self._name}-{index}",
                                                  persistence=self._persistence,
                                                  engine_factory=self._engine_factory,
                                                  wait_timeout=self._wait_timeout))
        if self.conductors:
            names = [conductor.name for conductor in self.conductors]
            self._owner_records = claim_owners.OwnerRecords(self._conf.state_dir)
            claim_owners.take_over_dead_claims(self.conductors[0].jobboard,
                                               self._owner_records, names)
            self._owner_records.register(names)
        for conductor in self.conductors:
            thread = threading.Thread(target=self._run, args=(conductor,), daemon=True,
                                      name=f"conductor-{conductor.name}")
            self._threads.append(thread)
            thread.start()

    @staticmethod
    def _run(conductor: FleetConductor) -> None:
        try:
            conductor.run()
        except Exception:
            LOG.exception("conductor %s stopped on an error", conductor.name)

    def stop(self, timeout: float | None = None) -> None:
        """Ask every worker to stop and wait for them.

        A running flow is suspended at its next atom boundary and its job
        abandoned, so another conductor (or this process restarted) resumes it.
        """
        for conductor in self.conductors:
            conductor.stop()
        for thread in self._threads:
            thread.join(timeout)
        for conductor in self.conductors:
            conductor.close()
        self.conductors.clear()
        self._threads.clear()
        if self._owner_records is not None:
            self._owner_records.unregister()
            self._owner_records = None

    def __enter__(self) -> ConductorPool:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
