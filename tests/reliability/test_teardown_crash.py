"""kill -9 of conductors deleting a reservation in groups; another one finishes.

A 5-instance reservation is built (by a first conductor), then deleted the way
the API deletes it, in groups of two instances a task ([conductor]
instances_per_atom): a conductor doomed to die at one point of the teardown
takes the job, and a survivor takes it over once the dead one's claim expires.
The points: a group's atom boundaries, inside a group once every guest of it
is destroyed (no claim released, no row DELETED yet), and the reservation's
last step. In the end every reservation is DELETED, every instance DELETED with
no guest on its host and no allocation, and the strict audit is clean.
See tests/reliability/provision_cloud.py.
"""

from __future__ import annotations

import signal
import subprocess

from fleetflow.common import states
from fleetflow.common.crash_points import (
    AFTER_CHECKPOINT,
    AFTER_EFFECT,
    BEFORE_EXECUTE,
    MEMBERS_DESTROYED,
)

COUNT = 5
GROUPED = 2  # groups delete-0000 (2), delete-0002 (2), delete-0004 (1)
TARGETS = [f"delete-0002:{point}" for point in (BEFORE_EXECUTE, MEMBERS_DESTROYED,
                                                AFTER_EFFECT, AFTER_CHECKPOINT)]
TARGETS += [",".join(f"delete-{first:04d}:{MEMBERS_DESTROYED}" for first in (0, 2, 4)),
            f"finish-teardown:{AFTER_EFFECT}"]


class TeardownCase:
    """A reservation on a board of its own: built by a first conductor, then its
    teardown run by one doomed to die at ``target``, then by a survivor."""

    def __init__(self, index: int, target: str, tenant: str):
        self.index, self.target, self.tenant = index, target, tenant
        self.board = f"teardown-{index}"
        self.reservation_id: str | None = None
        self.stage, self.process, self.doomed_code = "build", None, None
        self.done = False

    def __repr__(self) -> str:
        return f"case {self.index} ({self.target}, {self.stage})"

    def start(self, cloud) -> None:
        self.reservation_id = cloud.reserve(COUNT, board=self.board)
        self.process = cloud.spawn(f"first-{self.index}", board=self.board)

    def advance(self, cloud) -> None:
        if self.stage == "build":
            if cloud.settled(self.reservation_id):
                assert cloud.status(self.reservation_id) == states.ACTIVE
                self.process.terminate()
                self.process.wait(30)
                _delete(cloud, self.reservation_id, self.board, self.tenant)
                self.process = cloud.spawn(f"doomed-{self.index}", board=self.board,
                                           crash_at=self.target)
                self.stage = "doomed"
        elif self.stage == "doomed":
            code = self.process.poll()
            if code is not None:
                self.doomed_code = code
                self.process = cloud.spawn(f"survivor-{self.index}", board=self.board)
                self.stage = "survivor"
            elif _deleted(cloud, self.reservation_id):
                # Deleted, and the doomed one alive: it dies an instant after the
                # last step's effect, or its target never fired (the test checks).
                try:
                    self.doomed_code = self.process.wait(5)
                except subprocess.TimeoutExpired:
                    self.process.terminate()
                    self.doomed_code = self.process.wait(30)
                self.done = True
        elif _deleted(cloud, self.reservation_id):
            self.process.terminate()
            self.done = True


def _delete(cloud, reservation_id: str, board: str, tenant: str) -> None:
    """DELETE as the API does it, its teardown posted on ``board``."""
    from fleetflow.engine.submit import Submitter
    from fleetflow.services.reservations import ReservationOps

    ReservationOps(cloud.conf, cloud.database, submit=Submitter(
        cloud.board(board), cloud.backend)).delete_reservation(tenant, reservation_id)


def _deleted(cloud, reservation_id: str) -> bool:
    return cloud.status(reservation_id) == states.DELETED and all(
        inst["status"] == states.DELETED for inst in cloud.instances(reservation_id))


def test_kill_inside_a_teardown_in_groups(provision_cloud, provision_harness,
                                          assert_audit_clean):
    cloud = provision_cloud
    cloud.conf.set_override("instances_per_atom", GROUPED, group="conductor")
    cases = [TeardownCase(i, target, provision_harness.TENANT)
             for i, target in enumerate(TARGETS)]
    provision_harness.run_staged_cases(cloud, cases, parallel=6)
    not_killed = [c for c in cases if c.doomed_code != -signal.SIGKILL]
    assert not not_killed, f"these conductors did not die at their target: {not_killed}\n" \
        + cloud.log_tail(names={f"doomed-{c.index}" for c in not_killed})
    for case in cases:
        for inst in cloud.instances(case.reservation_id):
            assert cloud.driver.get_instance(inst["host"], inst["uuid"]) is None, (case, inst)
            assert cloud.placement.get_allocations(inst["uuid"]).allocations == {}, (case, inst)
    report = assert_audit_clean(*cloud.audit_args())
    assert report.counts["instances"] >= len(cases) * COUNT
