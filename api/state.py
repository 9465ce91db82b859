"""Per-application state of the API: configuration, database, policy, services.

One Flask app holds one :class:`AppState` in ``app.extensions["fleetflow"]``,
so tests can run several differently configured apps in one process. Views
reach it with :func:`current_state`.

Services are set by whoever builds the app (``services.wiring.make_services``
for ``fleetflow serve`` and the WSGI app, tests) and read by the routes that
need them; the names in use are listed below so that each part adds its own
without touching the others::

    reservations      services.reservations.ReservationOps
    evacuations       services.evacuations.EvacuationOps
    hosts             services.hosts.HostOps
    vclusters         services.vclusters.VClusterOps
    placement_store   the placement allocation store (persistence layer)
    compute_rpcapi    compute.rpcapi client of the compute hosts
    job_submitter     the engine's entry point that posts flow jobs
    jobboard          the jobboard flows are posted to (resume, revert, audit)
    logbook_backend   TaskFlow's logbook backend (the flow routes read it)

Routes that only read rows call module functions of their service with
``database`` (``services.catalog``, ``services.groups`` ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flask
from oslo_config import cfg

EXTENSION_KEY = "fleetflow"


@dataclasses.dataclass
class AppState:
    """What every request of one app shares."""

    conf: cfg.ConfigOpts
    database: Any  # fleetflow.persistence.db.Database
    enforcer: Any = None  # oslo_policy.policy.Enforcer, set by create_app
    services: dict[str, Any] = dataclasses.field(default_factory=dict)

    def service(self, name: str) -> Any:
        """The service registered under ``name``; a clear error when it is missing.

        NOTE: a missing service is a deployment mistake, not a client error, so
        it surfaces as a 500 (logged) rather than silently doing nothing.
        """
        try:
            return self.services[name]
        except KeyError:
            raise LookupError(
                f"API service {name!r} is not configured; pass it to "
                f"create_app(services={{{name!r}: ...}})") from None


def current_state() -> AppState:
    """The :class:`AppState` of the app handling the current request."""
    return flask.current_app.extensions[EXTENSION_KEY]
