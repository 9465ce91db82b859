"""A claim and a boot reverted with an earlier try's result undo this try's work.

TaskFlow's stock engine keeps a task's result of the try before when its
chain's retry runs it again (tests/unit/engine/test_stale_results.py shows
it). A conductor killed while such a claim or boot runs again, after the
reservation's revert was decided, leaves it RUNNING with the earlier try's
``{"host": ...}``; the conductor that resumes reverts it with that result.
These tests build that persisted state from a real run — the instance built
on its host, its claim and boot RUNNING again with a result naming another
host — and resume it: the revert must free the host the world shows.
"""

from __future__ import annotations

import pytest
from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.engine import actions, flow_views
from fleetflow.engine.submit import Submitter
from fleetflow.persistence.models import Instance, Reservation
from fleetflow.services.reservations import ReservationOps, ReservationRequest
from tests.unit.flows.test_revert_without_retry import resume_stranded
from tests.unit.flows.test_stranded_revert import conductors, strict_audit  # noqa: F401


# Best-effort has no claim-primaries, whose revert would free the primary for the claim.
@pytest.mark.parametrize("policy", [states.BEST_EFFORT, states.ALL_OR_NOTHING])
def test_a_chain_reverted_with_its_earlier_tries_result_frees_its_host(
        evac_cloud, conductors, policy):  # noqa: F811
    board, backend, run_until = conductors
    cloud = evac_cloud
    ops = ReservationOps(cloud.conf, cloud.database, submit=Submitter(board, backend))
    reservation, _ = ops.reserve(ReservationRequest(
        tenant_id="t1", user_id="u1", flavor_ref="m1.small", image_ref="cirros",
        min_count=1, max_count=1, policy=policy))
    flow_id = reservation.flow_id
    assert run_until(flow_id, tf_states.SUCCESS, tf_states.FAILURE) == tf_states.SUCCESS
    with cloud.database.session() as session:
        instance = session.get(Instance, session.query(Instance.id).filter_by(
            reservation_id=reservation.id).scalar())
        uuid, host = instance.id, instance.host
    earlier = next(h for h in sorted(cloud.driver.hosts) if h != host)

    detail = actions._load(backend, flow_id)
    atoms = {atom.name: atom for atom in flow_views.atoms(detail)}
    changed = actions._mark_for_revert(detail)
    for name in ("inst-0000-claim", "inst-0000-boot"):
        atoms[name].state = tf_states.RUNNING
        atoms[name].results = {"host": earlier}  # what the try on ``earlier`` returned
        changed.append(name)
    detail.state = tf_states.RUNNING  # as a killed engine leaves it
    actions._save(backend, detail, changed)
    resume_stranded(board, backend, flow_id)

    assert run_until(flow_id, tf_states.REVERTED, tf_states.FAILURE) == tf_states.REVERTED
    with cloud.database.session() as session:
        assert session.get(Reservation, reservation.id).status == states.REVERTED
    assert cloud.runtime.placement.get_allocations(uuid).allocations == {}
    assert cloud.driver.get_instance(host, uuid) is None
    report = strict_audit(cloud, board)
    assert report.clean, report.summary()
