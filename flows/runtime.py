"""The clients tasks use, set once per process.

A flow must be rebuildable from plain data by any conductor
(docs/architecture.md, "Flows are rebuilt from plain data"), so tasks never
capture a client or a session. They look up the process's
:class:`Runtime` when they run; the conductor process (or a test) installs it
with :func:`install` before running flows.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

_lock = threading.Lock()
_runtime: Runtime | None = None


@dataclasses.dataclass
class Runtime:
    """What tasks talk to: the database, placement and the compute hosts."""

    conf: Any
    database: Any  # persistence.db.Database
    placement: Any  # persistence.placement.client.PlacementClient
    compute: Any  # compute.client(): rpcapi.ComputeAPI, or openstack's in openstack mode


def install(runtime: Runtime) -> Runtime:
    global _runtime
    with _lock:
        _runtime = runtime
    return runtime


def uninstall() -> None:
    global _runtime
    with _lock:
        _runtime = None


def get() -> Runtime:
    runtime = _runtime
    if runtime is None:
        raise RuntimeError("no fleetflow runtime installed in this process: conductors "
                           "call flows.runtime.install() before running flows")
    return runtime


def install_from_conf(conf, database=None) -> Runtime:
    """Build and install the clients ``conf`` describes (conductor processes, serve)."""
    # Importing the flow packages registers their factories by name.
    import fleetflow.flows.evacuate  # noqa: F401
    import fleetflow.flows.provision  # noqa: F401
    import fleetflow.flows.vcluster  # noqa: F401
    from fleetflow import compute
    from fleetflow.persistence.db import get_database
    from fleetflow.persistence.placement.client import from_conf as placement_from_conf

    database = database or get_database(conf)
    return install(Runtime(conf, database, placement_from_conf(conf, database),
                           compute.client(conf, database)))
