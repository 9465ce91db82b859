"""Host selection: filters, group policies and weighers over one cloud snapshot.

``schedule(spec, snapshot)`` is a pure function (no database, no network):
the caller builds the :class:`CloudSnapshot` (``snapshot_from_db``) and the
:class:`RequestSpec`, and claims the returned :class:`Placement`.
"""

from fleetflow.scheduler.result import InstancePlacement, NoValidHost, Placement
from fleetflow.scheduler.scheduler import schedule
from fleetflow.scheduler.snapshot import CloudSnapshot, HostState, snapshot_from_db
from fleetflow.scheduler.spec import GroupSpec, RequestSpec

__all__ = ["CloudSnapshot", "GroupSpec", "HostState", "InstancePlacement", "NoValidHost",
           "Placement", "RequestSpec", "schedule", "snapshot_from_db"]
