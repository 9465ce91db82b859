"""Destroying guests for the teardowns that take many at once (a reservation's
groups, a vcluster's): one call an agent where the compute API sends them so
(``compute/destroy_batches.py``), each alone otherwise.

A dead host's guest is not a failure: the row says it is deleted, and a host
that comes back destroys the guests the database says are deleted.
"""

from __future__ import annotations

import logging

from fleetflow.compute.build_batches import UNBATCHED
from fleetflow.compute.exceptions import HostDead, OutcomeUnknown
from fleetflow.flows.tasks.members import failures

LOG = logging.getLogger(__name__)


def destroy_alone(rt, host: str, instance_id: str, fence) -> None:
    """Destroy one guest (idempotent, sent again after an unknown outcome)."""
    try:
        rt.compute.ensure_destroyed(host, instance_id, fence=fence)
    except HostDead:
        _dead(instance_id, host)


def _dead(instance_id: str, host: str) -> None:
    LOG.info("%s: host %s is dead; its copy goes when it returns", instance_id, host)


def destroy_guests(rt, hosts: dict[str, str], fence) -> dict:
    """The guests ``{uuid: host}`` destroyed, together where the compute API sends
    them so (``destroy_all``), else each alone: ``{uuid: error}`` of those that
    failed."""
    uuids = list(hosts)
    destroy_all = getattr(rt.compute, "destroy_all", None)  # Nova's client has none
    outcomes = (destroy_all([(hosts[u], u) for u in uuids], fence=fence)
                if destroy_all is not None and uuids else [UNBATCHED] * len(uuids))
    failed, alone = {}, []
    for uuid, outcome in zip(uuids, outcomes, strict=True):
        if outcome is UNBATCHED or isinstance(outcome, OutcomeUnknown):
            alone.append(uuid)  # sent alone, asking the host again: it is idempotent
        elif isinstance(outcome, HostDead):
            _dead(uuid, hosts[uuid])
        elif outcome is not None:
            failed[uuid] = outcome
    failed.update(failures(lambda uuid: destroy_alone(rt, hosts[uuid], uuid, fence), alone))
    return failed
