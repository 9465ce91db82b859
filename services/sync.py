"""Syncing the cloud into fleetflow's rows (``[cloud] driver = openstack``).

:func:`sync` is what ``fleetflow fleet sync`` and the conductors' periodic sync
call: read the cloud (``compute.openstack.inventory``), then write it in one
transaction (``persistence.cloud_sync``, which says what is mirrored and what
fleetflow keeps).
"""

from __future__ import annotations

import logging

from fleetflow.common.exceptions import InvalidInput
from fleetflow.common.periodic import Periodic

LOG = logging.getLogger(__name__)

DEFAULT_REGION = "RegionOne"
# A concurrent claim on a synced provider makes the transaction lose its race;
# reading the rows again in a fresh transaction settles it.
APPLY_ATTEMPTS = 3


class NotOpenStack(InvalidInput):
    """The configured cloud driver is not openstack: there is no cloud to sync."""


def sync(conf, database) -> dict:
    """Mirror the configured cloud into ``database``; returns the counts of
    ``persistence.cloud_sync.apply`` plus ``cloud`` (its name) and ``region``."""
    from fleetflow.compute.openstack import connection as cloud_connection
    from fleetflow.compute.openstack import inventory
    from fleetflow.persistence import cloud_sync
    from fleetflow.persistence.placement import allocations as allocs

    if conf.cloud.driver != "openstack":
        raise NotOpenStack(f"[cloud] driver is {conf.cloud.driver!r}: only an openstack "
                           "cloud is synced (set [cloud] driver = openstack)")
    view = inventory.read_cloud(cloud_connection.connect(conf))
    region = view.region or DEFAULT_REGION
    for attempt in range(APPLY_ATTEMPTS):
        try:
            with database.session() as session:
                counts = cloud_sync.apply(session, view, region)
            break
        except allocs.LostRace:
            if attempt == APPLY_ATTEMPTS - 1:
                raise
            LOG.debug("cloud sync lost a placement race; applying again")
    counts.update(cloud=cloud_connection.cloud_name(conf), region=region)
    LOG.info("synced %(hosts)d hosts (%(up)d up, %(down)d down, %(vanished)d vanished), "
             "%(flavors)d flavors, %(images)d images from cloud %(cloud)s", counts)
    return counts


class PeriodicSync(Periodic):
    """:func:`sync` every ``[openstack] sync_interval`` seconds on a daemon thread.

    Every serve and conductor process runs one, so hosts that go down, flavors
    added and others' usage reach the scheduler without an operator. A sync
    that fails (the cloud unreachable a moment) is logged and tried at the
    next interval: what the rows hold stays as the last sync left it.
    """

    def __init__(self, conf, database):
        super().__init__("cloud-sync", conf.openstack.sync_interval)
        self.conf, self.database = conf, database

    def tick(self, woken: bool) -> None:
        sync(self.conf, self.database)
