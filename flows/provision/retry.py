"""Which host an instance tries next: its candidates, then a fresh reschedule.

One retry controller per instance wraps its claim -> boot (-> attach) chain
(Masakari's shape: walk candidate hosts with a retry). When a try fails, the
chain is reverted — its claim released, its guest destroyed — and the next
candidate is tried: first the scheduler's alternates, then, if those were
full or broken meanwhile (another reservation took them: Nova bug 1837955's
case), up to ``[scheduler] max_reschedules`` hosts chosen afresh from the
cloud as it is now, excluding every host already tried. A try that lost its
claim to a concurrent reservation (ClaimRace: the host filled up or its group
place was taken) does not count against that limit: nothing was built, and
concurrent schedulers all see the same best free host, so under a burst of
reservations the losers would otherwise run out of reschedules while hosts
are still free. Every try excludes the hosts tried before, so this ends.

Out of hosts: ``all-or-nothing`` reverts the whole reservation;
``best-effort`` gives the chain the value None, under which it records the
instance as ERROR and succeeds, so the others keep what they built.
"""

from __future__ import annotations

import logging

from taskflow import retry

from fleetflow.common import metrics, states
from fleetflow.flows import runtime
from fleetflow.flows.provision import schedule
from fleetflow.flows.tasks.base import FleetRetry
from fleetflow.flows.tasks.claim import ClaimRace
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Instance
from fleetflow.scheduler.result import NoValidHost

LOG = logging.getLogger(__name__)

# The value that tells a best-effort chain "no host left: record the failure".
NO_HOST = None


def record_no_host(instance_uuid: str, message: str) -> None:
    """The reschedule's NO_VALID_HOST on the instance, unless a fault says more already."""
    rt = runtime.get()
    with rt.database.session() as session:
        current = session.get(Instance, instance_uuid)
        if current is not None and current.fault is None:
            current.fault = rows.fault(NoValidHost.code, message, step="reschedule")


class HostCandidatesRetry(FleetRetry):
    """Provides the host one instance's chain runs on; next candidate on each failure.

    Revert: nothing (the chain's own tasks undo their effects).
    """

    def __init__(self, name: str, index: int, policy: str, provides: str,
                 max_reschedules: int = 3):
        super().__init__(name=name, provides=provides)
        self.index = index
        self.policy = policy
        self.max_reschedules = max_reschedules

    def _tried(self, history) -> list:
        return list(history.provided_iter())

    def _candidates(self, placements: dict) -> list[str]:
        return list(placements["hosts"].get(str(self.index), []))

    def _rescheduled(self, history, candidates: list) -> int:
        """Reschedules used up: tries beyond the candidates that did not lose a claim race."""
        return sum(1 for index, host in enumerate(history.provided_iter())
                   if host is not NO_HOST and host not in candidates
                   and not history.caused_by(ClaimRace, index=index))

    def execute(self, history, placements: dict, instance_uuids: list,
                request_spec: dict) -> str | None:
        tried = self._tried(history)
        candidates = self._candidates(placements)
        for host in candidates:
            if host not in tried:
                return host
        if self._rescheduled(history, candidates) < self.max_reschedules:
            excluded = [h for h in tried if h is not NO_HOST]
            try:
                result = schedule.place(request_spec, [instance_uuids[self.index]],
                                        excluded_hosts=excluded, count=1)
                host = result.instances[0].host
                LOG.info("%s: candidates exhausted, rescheduled onto %s", self.name, host)
                metrics.RESCHEDULES.inc()
                return host
            except NoValidHost as exc:
                LOG.info("%s: nothing left to reschedule onto: %s", self.name, exc)
                record_no_host(instance_uuids[self.index], exc.message)
        if self.policy == states.BEST_EFFORT:
            return NO_HOST
        raise NoValidHost([], placed=0, min_count=1, index=self.index)

    def on_failure(self, history, placements: dict, **kwargs) -> str:
        tried = self._tried(history)
        if NO_HOST in tried:
            # The best-effort "give up" value failed too: nothing sensible left.
            return retry.REVERT_ALL
        candidates = self._candidates(placements)
        if any(host not in tried for host in candidates):
            return retry.RETRY
        if self._rescheduled(history, candidates) < self.max_reschedules:
            return retry.RETRY
        if self.policy == states.BEST_EFFORT:
            return retry.RETRY
        return retry.REVERT_ALL

    def revert(self, history, *args, **kwargs) -> None:
        return None
