"""The reschedule limit counts failed builds, not claims lost to concurrent reservations."""

from __future__ import annotations

import pytest
from taskflow import retry
from taskflow.types import failure

from fleetflow.common import states
from fleetflow.compute.exceptions import BuildFailed
from fleetflow.flows.provision.flow import provision_flow
from fleetflow.flows.provision.retry import HostCandidatesRetry
from fleetflow.flows.tasks.claim import ClaimRace

PLACEMENTS = {"hosts": {"0": ["a", "b", "c"]}}


def history(*attempts) -> retry.History:
    """(host, exception) per try, in order."""
    return retry.History([(host, {"inst-0000-claim" if isinstance(error, ClaimRace)
                                  else "inst-0000-boot": failure.Failure.from_exception(error)})
                          for host, error in attempts])


def controller() -> HostCandidatesRetry:
    return HostCandidatesRetry("inst-0000-retry", index=0, policy=states.ALL_OR_NOTHING,
                               provides="inst-0000.host", max_reschedules=3)


def race(host):
    return host, ClaimRace(f"{host}: taken meanwhile", host=host)


def build_failed(host):
    return host, BuildFailed(f"{host}: broken", host=host, uuid="u")


def test_lost_claim_races_leave_reschedules_for_later():
    tries = history(race("a"), race("b"), race("c"), race("d"), race("e"), race("f"),
                    race("g"))
    assert controller().on_failure(tries, placements=PLACEMENTS) == retry.RETRY


def test_failed_builds_beyond_the_candidates_use_the_reschedules_up():
    tries = history(build_failed("a"), race("b"), build_failed("c"), build_failed("d"),
                    race("e"), build_failed("f"), build_failed("g"))
    assert controller().on_failure(tries, placements=PLACEMENTS) == retry.REVERT_ALL
    # Two failed builds beyond the candidates: one reschedule is left.
    tries = history(build_failed("a"), race("b"), build_failed("c"), build_failed("d"),
                    race("e"), build_failed("f"))
    assert controller().on_failure(tries, placements=PLACEMENTS) == retry.RETRY


def _retries(flow):
    if flow.retry is not None:
        yield flow.retry
    for item, _ in flow.iter_nodes():
        if hasattr(item, "iter_nodes"):
            yield from _retries(item)


@pytest.mark.parametrize("limit", [0, 1, 5])
def test_a_reservation_flow_gives_every_instance_its_reschedule_limit(limit):
    retries = list(_retries(provision_flow("r-1", 3, max_reschedules=limit)))
    assert [r.name for r in retries] == ["inst-0000-retry", "inst-0001-retry",
                                         "inst-0002-retry"]
    assert {r.max_reschedules for r in retries} == {limit}
