"""The recovery monitor: a thread in every conductor process, one of them acting.

Every ``[recovery] interval`` each monitor tries to take the lease row
``recovery-monitor`` (persistence.intents.take_lease: a conditional UPDATE
with an expiry); the holder makes one pass. Taking the lease from another
process also takes a new fencing token (persistence.fences), and every
write of a pass checks it in its transaction: a monitor that stalled past
its lease and wakes up is refused (StaleFence) before it writes a decision.
The evacuation itself is created with the id its fence recorded, so two
monitors creating it create one.
"""

from __future__ import annotations

import logging

from fleetflow.common.config import openstack_mode
from fleetflow.common.exceptions import StaleFence
from fleetflow.common.periodic import Periodic
from fleetflow.persistence import fences, intents
from fleetflow.persistence import recoveries as rows
from fleetflow.persistence.models import utcnow
from fleetflow.services.recovery import act, detect

LOG = logging.getLogger(__name__)

# The lease outlasts a pass whose pings time out (detect.PING_TIMEOUT) twice.
MIN_LEASE_SECONDS = 2 * detect.PING_TIMEOUT


def lease_seconds(conf) -> float:
    return max(3.0 * conf.recovery.interval, MIN_LEASE_SECONDS)


class RecoveryMonitor(Periodic):
    """Watches the hosts' heartbeats and recovers dead hosts (docs/recovery.md).

    ``evacuations``: services.evacuations.EvacuationOps (the operators'
    path); ``hosts``: services.hosts.HostOps (placement's disabled trait, the
    reserve pool); ``compute``: the hosts' RPC client, or the OpenStack driver
    (the ping, and there Nova's heartbeats).
    """

    def __init__(self, conf, database, evacuations, hosts, compute, name: str):
        super().__init__(f"{name}-recovery", conf.recovery.interval)
        self.conf = conf
        self.database = database
        self.evacuations = evacuations
        self.hosts = hosts
        self.compute = compute
        self.fence: dict | None = None

    def tick(self, woken: bool) -> None:
        try:
            self.run_once()
        except StaleFence:
            LOG.warning("%s: another monitor took over; this one stands by", self.name)
            self.fence = None

    def take_lease(self) -> bool:
        """Whether this monitor acts now; a new fencing token when it just took over."""
        with self.database.session() as session:
            held = intents.take_lease(session, rows.LEASE_KEY, self.name,
                                      lease_seconds(self.conf))
            if not held:
                self.fence = None
                return False
            if self.fence is None:
                self.fence = fences.advance(session, rows.LEASE_KEY, self.name)
                LOG.info("%s acts for the fleet (fence %s)", self.name, self.fence["token"])
        return True

    def run_once(self) -> bool:
        """One pass if this process holds the lease; False when another does."""
        if not self.take_lease():
            return False
        if openstack_mode(self.conf):
            detect.cloud_heartbeats(self.database, self.compute, self.fence)
        now = utcnow()
        detect.open_suspects(self.database, self.conf, self.fence, now)
        detect.confirm(self.database, self.conf, self.compute, self.fence, now)
        detect.guard(self.database, self.conf, self.fence, now)
        # FENCED rows first: a crash between a fence and its evacuation is
        # finished before anything new is fenced.
        act.evacuate(self.database, self.conf, self.evacuations, self.hosts, self.fence)
        for batch in act.ready_batches(self.database, self.conf, now):
            if act.fence(self.database, self.hosts, self.fence, batch):
                act.crash_point()
                act.evacuate(self.database, self.conf, self.evacuations, self.hosts,
                             self.fence)
        act.follow(self.database, self.fence)
        return True
