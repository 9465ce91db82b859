"""The provision flow: a reservation of N instances.

    reservation-lifecycle      marks the reservation REVERTED on revert
    schedule                   all N placed from one view (primary + alternates)
    claim-primaries            all-or-nothing only: every primary in one write
    instances (unordered)
      inst-0000 (retry: inst-0000-retry walks the candidates, then reschedules)
        inst-0000-claim        allocation + group membership
        inst-0000-boot         build on the host, wait for ACTIVE
        inst-0000-attach       only with a data volume per instance
      inst-0001 ...
    finish                     ACTIVE, PARTIAL (best-effort) or revert all

With ``batch`` > 1 (and no data volumes), ``instances`` holds one task per
group of that many instances instead, each claiming and booting its members
and walking their hosts itself (flows/provision/batch.py)::

    instances (unordered)
      batch-0000               instances 0 to batch - 1
      batch-0100 ...

Atom names depend only on the arguments, so any conductor rebuilds the same
flow and TaskFlow resumes it atom by atom.
"""

from __future__ import annotations

from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.common import states
from fleetflow.flows import keys
from fleetflow.flows.provision.batch import BuildInstances
from fleetflow.flows.provision.lifecycle import FinishReservation, MarkReservationRevertedOnRevert
from fleetflow.flows.provision.retry import HostCandidatesRetry
from fleetflow.flows.provision.schedule import ScheduleInstances
from fleetflow.flows.provision.volume import AttachVolume
from fleetflow.flows.registry import flow_factory
from fleetflow.flows.status_listener import ReservationStatusListener
from fleetflow.flows.tasks.boot import BootInstance
from fleetflow.flows.tasks.claim import ClaimPrimaries, ClaimResources

# As [scheduler] max_reschedules: the submitter passes the configured value.
MAX_RESCHEDULES = 3


def instance_prefix(index: int, count: int) -> str:
    return f"inst-{index:0{max(4, len(str(count - 1)))}d}"


def instance_chain(index: int, count: int, policy: str, with_volumes: bool,
                   max_reschedules: int = MAX_RESCHEDULES) -> linear_flow.Flow:
    """One instance: its retry controller around claim -> boot (-> attach)."""
    prefix = instance_prefix(index, count)
    host_key = keys.scoped(prefix, keys.HOST)
    chain = linear_flow.Flow(prefix, retry=HostCandidatesRetry(
        f"{prefix}-retry", index=index, policy=policy, provides=host_key,
        max_reschedules=max_reschedules))
    bind = {"host": host_key}
    claim_inject = {"index": index}
    if policy != states.ALL_OR_NOTHING:
        # No fast path ran: nothing was claimed for this instance beforehand.
        claim_inject[keys.PRIMARIES_CLAIMED] = []
    chain.add(ClaimResources(f"{prefix}-claim", rebind=bind, inject=claim_inject),
              BootInstance(f"{prefix}-boot", rebind=bind, inject={"index": index},
                           final=not with_volumes))
    if with_volumes:
        chain.add(AttachVolume(f"{prefix}-attach", rebind=bind, inject={"index": index}))
    return chain


def instance_batches(count: int, batch: int, policy: str,
                     max_reschedules: int) -> list[BuildInstances]:
    """One task a group of ``batch`` instances, named by its first instance."""
    width = max(4, len(str(count - 1)))
    return [BuildInstances(f"batch-{first:0{width}d}", first, min(count, first + batch),
                           policy, max_reschedules)
            for first in range(0, count, batch)]


@flow_factory("provision", listeners=(ReservationStatusListener,))
def provision_flow(reservation_id: str, count: int, policy: str = states.ALL_OR_NOTHING,
                   with_volumes: bool = False, max_reschedules: int = MAX_RESCHEDULES,
                   batch: int = 1) -> linear_flow.Flow:
    """Schedule, claim, boot (and attach) ``count`` instances of one reservation.

    Each instance tries up to ``max_reschedules`` fresh hosts after its
    candidates (``[scheduler] max_reschedules``); it is a flow argument so that
    a conductor resuming the flow keeps the bound it was submitted with.
    ``batch``: instances per task (``[conductor] instances_per_atom``); flows
    submitted without it keep one chain an instance.
    """
    flow = linear_flow.Flow(f"provision-{reservation_id}")
    flow.add(MarkReservationRevertedOnRevert("reservation-lifecycle"),
             ScheduleInstances("schedule"))
    if policy == states.ALL_OR_NOTHING:
        flow.add(ClaimPrimaries("claim-primaries"))
    instances = unordered_flow.Flow("instances")
    if batch > 1 and not with_volumes:
        instances.add(*instance_batches(count, batch, policy, max_reschedules))
    else:
        for index in range(count):
            instances.add(instance_chain(index, count, policy, with_volumes,
                                         max_reschedules))
    flow.add(instances, FinishReservation("finish"))
    return flow
