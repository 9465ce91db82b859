"""engine/jobboard/redis.py on the real Redis: claims expire and only their owner extends them."""

from __future__ import annotations

import time
import uuid

import pytest
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states

from fleetflow.engine.jobboard.boards import make_jobboard


@pytest.fixture
def redis_board(make_conf, redis_url):
    name = "test-board-" + uuid.uuid4().hex[:8]
    conf = make_conf(jobboard={"backend": "redis", "redis_url": redis_url,
                               "board_name": name, "claim_expiry": 2})
    board = make_jobboard(conf)
    yield board
    client = board._client
    for key in client.scan_iter(match=f"{name}*"):
        client.delete(key)
    board.close()


def test_a_claim_expires_unless_its_owner_extends_it(redis_board):
    board = redis_board
    job = board.post("flow-1", details={"flow_uuid": "flow-1"})
    board.claim(job, "alice", expiry=0.5)
    with pytest.raises(tf_exc.UnclaimableJob):
        board.claim(job, "bob")
    for _ in range(4):
        time.sleep(0.25)
        assert board.extend_claim(job, "alice", expiry=0.5) is True
    assert board.find_owner(job) == "alice"  # 1 s after a 0.5 s claim
    # bob cannot extend (and so cannot keep) alice's claim.
    assert board.extend_claim(job, "bob") is False
    assert board.find_owner(job) == "alice"
    deadline = time.monotonic() + 10
    while job.state != tf_states.UNCLAIMED and time.monotonic() < deadline:
        time.sleep(0.1)  # alice "died": nobody extends
    board.claim(job, "bob")
    assert board.find_owner(job) == "bob"
    assert board.extend_claim(job, "alice") is False
    board.consume(job, "bob")
    assert board.extend_claim(job, "bob") is False  # gone


def test_claims_use_the_configured_expiry(redis_board):
    job = redis_board.post("flow-2")
    redis_board.claim(job, "alice")
    assert 0 < job.expires_in() <= 2.0


def test_an_unclaimed_job_has_no_owner(redis_board):
    board = redis_board
    job = board.post("flow-2", details={"flow_uuid": "flow-2"})
    # Stock TaskFlow raises TypeError here (it decodes the missing owner key).
    assert board.find_owner(job) is None
    board.claim(job, "carol")
    assert board.find_owner(job) == "carol"
    board.abandon(job, "carol")
    assert board.find_owner(job) is None
