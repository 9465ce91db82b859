"""The audit lists the Redis jobboard too: no job, a live claim, a claim that expired.

The flows live in fleetflow's logbook on SQLite, their jobs on the real Redis
under a namespace of the test's own. On Redis an expired claim leaves no
owner behind: the job reads unclaimed since its last claim.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest
import sqlalchemy as sa
from taskflow import states as tf_states

from fleetflow.engine import submit as submit_mod
from fleetflow.persistence.logbook.models import FLOWDETAILS
from fleetflow.services.audit import flows as audit_flows
from fleetflow.services.audit.report import audit


def _toy_flows() -> None:
    """The engine tests' toy flows, registered once whoever imported them first."""
    from fleetflow.flows import registry

    if "toy-linear" not in registry.names():
        import fleetflow.tests.unit.engine.conftest  # noqa: F401


@pytest.fixture
def redis_setup(make_conf, redis_url):
    _toy_flows()
    from fleetflow.engine.jobboard.boards import make_jobboard
    from fleetflow.persistence.db import get_database
    from fleetflow.persistence.logbook.backend import LogbookBackend

    name = "test-audit-" + uuid.uuid4().hex[:8]
    conf = make_conf(jobboard={"backend": "redis", "redis_url": redis_url,
                               "board_name": name, "claim_expiry": 2})
    database = get_database(conf)
    database.upgrade()
    backend = LogbookBackend({"connection": database.url}, engine=database.engine)
    board = make_jobboard(conf, backend)
    yield database, backend, board
    client = board._client
    for key in client.scan_iter(match=f"{name}*"):
        client.delete(key)
    board.close()


def _stale_flow(database, board, backend, state=tf_states.RUNNING) -> str:
    flow_id = submit_mod.submit(board, backend, "toy-linear", {"count": 1},
                                store={"reservation_id": "r-1"})
    with database.transaction() as conn:
        conn.execute(FLOWDETAILS.update().where(FLOWDETAILS.c.uuid == flow_id).values(
            state=state, updated_at=audit_flows.utcnow() - dt.timedelta(minutes=10)))
    return flow_id


def _stranded(database, board, **kwargs) -> list[tuple[str, str]]:
    report = audit(database, None, None, board=board, **kwargs)
    assert report.counts["jobboard"] == 1
    return [(m.subject, m.detail) for m in report.of_kind("stranded_flow")]


def test_the_redis_board_is_listed(redis_setup):
    database, backend, board = redis_setup
    flow_id = _stale_flow(database, board, backend)
    [job] = list(board.iterjobs())
    assert _stranded(database, board) == []  # posted a moment ago
    board.claim(job, "conductor-1")
    assert _stranded(database, board, strict=True) == []  # a live claim
    # Its conductor died: the claim lapses and nobody takes the job.
    assert board.extend_claim(job, "conductor-1", expiry=0.2)
    deadline = time.monotonic() + 10
    while board.find_owner(job) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _stranded(database, board) == []  # just released: a conductor takes it
    [(subject, detail)] = _stranded(database, board, flow_grace=0.1)
    assert subject == flow_id and "its job unclaimed (last claimed or posted at" in detail
    # The board lost it (a restart without persistence).
    board.claim(job, "reconciler")
    board.consume(job, "reconciler")
    [(subject, detail)] = _stranded(database, board)
    assert subject == flow_id and detail.endswith("no job on the board")


def test_a_paused_or_finished_flow_is_not_judged(redis_setup):
    database, backend, board = redis_setup
    flow_id = _stale_flow(database, board, backend, state=tf_states.SUCCESS)
    with database.transaction() as conn:
        assert conn.scalar(sa.select(FLOWDETAILS.c.state)
                           .where(FLOWDETAILS.c.uuid == flow_id)) == tf_states.SUCCESS
    [job] = list(board.iterjobs())
    board.claim(job, "conductor-1")
    board.consume(job, "conductor-1")
    assert _stranded(database, board, strict=True) == []
