"""POST a reservation while the jobboard is down: 202, and its flow is posted once it is back.

The real ReservationOps service and Submitter, on the SQL jobboard and the
logbook backend of the test's SQLite database; only the board's ``post``
fails while the test says the board is down.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetflow.engine import reconcile as reconcile_mod
from fleetflow.engine import submit as submit_mod
from fleetflow.persistence import intents

URL = "/v2/tenant-a/reservations"


class Down:
    """Switches a board's ``post`` off and on."""

    def __init__(self, board):
        self.board, self.real, self.down = board, board.post, False
        board.post = self.post

    def post(self, *args, **kwargs):
        if self.down:
            raise ConnectionError("the jobboard is down")
        return self.real(*args, **kwargs)


@pytest.fixture
def engine_parts(conf, db):
    import fleetflow.flows.provision  # noqa: F401  (registers the flow)
    from fleetflow.engine.jobboard.boards import make_jobboard
    from fleetflow.persistence.logbook.backend import LogbookBackend

    backend = LogbookBackend({"connection": db.url}, engine=db.engine)
    board = make_jobboard(conf, backend)
    yield board, backend, Down(board)
    board.close()


@pytest.fixture
def api_services(conf, db, engine_parts):
    from fleetflow.services.reservations import ReservationOps

    board, backend, _ = engine_parts
    return {"reservations": ReservationOps(conf, db, submit_mod.Submitter(board, backend))}


def _post(client, headers, **extra):
    return client.post(URL, json={"reservation": {"flavor_ref": "m1.small",
                                                  "image_ref": "cirros", "count": 2}},
                       headers={**headers, **extra})


def test_a_post_while_the_board_is_down_answers_202_and_is_posted_later(
        conf, db, client, member_headers, sample_catalog, engine_parts):
    board, backend, switch = engine_parts
    switch.down = True
    answer = _post(client, member_headers, **{"Idempotency-Key": "order-1"})
    assert answer.status_code == 202, answer.json
    reservation = client.get(answer.headers["Location"], headers=member_headers).json
    flow_id = reservation["reservation"]["flow_id"]
    assert reservation["reservation"]["status"] == "PENDING"
    # Its flow is saved (the database was up); only the job is missing.
    assert submit_mod.load_status(backend, flow_id)["state"] == "PENDING"
    assert board.job_count == 0
    # A replay answers with the same reservation and writes nothing more.
    again = _post(client, member_headers, **{"Idempotency-Key": "order-1"})
    assert again.json["reservation"]["id"] == reservation["reservation"]["id"]
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(intents.FlowIntent)) == 1

    switch.down = False
    counts = reconcile_mod.reconcile(board, backend, db, conf)
    assert counts["reposted"] == 1
    assert [job.name for job in board.iterjobs()] == [flow_id]


def test_a_refused_post_writes_no_intent(db, client, member_headers, sample_catalog):
    answer = client.post(URL, json={"reservation": {"flavor_ref": "no-such-flavor",
                                                    "image_ref": "cirros"}},
                         headers=member_headers)
    assert answer.status_code == 400
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(intents.FlowIntent)) == 0
