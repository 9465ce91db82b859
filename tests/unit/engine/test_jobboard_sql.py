"""engine/jobboard/sql.py: TaskFlow's jobboard contract on the fleetflow database."""

from __future__ import annotations

import threading
import time

import pytest
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow.persistence import models as tf_models

from fleetflow.engine.jobboard.sql import SqlJobBoard
from fleetflow.testing.locks import ends_while_locked


def _board(database, name="b", expiry=2.0):
    board = SqlJobBoard(name, {"claim_expiry": expiry, "poll_interval": 0.05}, database)
    board.connect()
    return board


def test_post_lists_the_job_with_its_book_and_details(database):
    board = _board(database)
    book = tf_models.LogBook("book", uuid="book-1")
    job = board.post("flow-1", book=book, details={"flow_uuid": "flow-1"})
    [listed] = list(board.iterjobs())
    assert (listed.uuid, listed.name, listed.details) == (job.uuid, "flow-1",
                                                          {"flow_uuid": "flow-1"})
    assert listed.book_uuid == "book-1"
    assert listed.state == tf_states.UNCLAIMED
    assert board.job_count == 1


def test_jobs_are_listed_by_priority_then_posting_order(database):
    board = _board(database)
    first = board.post("a")
    urgent = board.post("b", priority="HIGH")
    second = board.post("c")
    assert [j.uuid for j in board.iterjobs()] == [urgent.uuid, first.uuid, second.uuid]


def test_boards_with_other_names_do_not_see_each_others_jobs(database):
    _board(database, "one").post("x")
    assert list(_board(database, "two").iterjobs()) == []


def test_claim_is_exclusive_until_it_expires(database):
    board = _board(database)
    job = board.post("flow")
    # Long enough that a loaded machine cannot let it lapse before bob tries.
    board.claim(job, "alice", expiry=60)
    assert job.state == tf_states.CLAIMED
    assert board.find_owner(job) == "alice"
    with pytest.raises(tf_exc.UnclaimableJob):
        board.claim(job, "bob")
    assert list(board.iterjobs(only_unclaimed=True)) == []
    # alice's last extension was a short one; then she dies: nobody extends, the
    # claim lapses and bob may take the job.
    assert job.extend_expiry(0.3)
    deadline = time.monotonic() + 10
    while job.state != tf_states.UNCLAIMED and time.monotonic() < deadline:
        time.sleep(0.1)
    assert board.find_owner(job) is None
    board.claim(job, "bob")
    assert board.find_owner(job) == "bob"
    # alice, back from the dead, cannot extend, consume or abandon bob's job.
    assert board.extend_claim(job, "alice") is False
    with pytest.raises(tf_exc.JobFailure):
        board.consume(job, "alice")
    with pytest.raises(tf_exc.JobFailure):
        board.abandon(job, "alice")
    assert board.find_owner(job) == "bob"


def test_extend_keeps_the_claim_alive_past_its_first_expiry(database):
    board = _board(database, expiry=0.6)
    job = board.post("flow")
    board.claim(job, "alice")
    for _ in range(6):
        time.sleep(0.2)
        assert board.extend_claim(job, "alice") is True
    # 1.2 s after a 0.6 s claim: still alice's, because she kept extending it.
    with pytest.raises(tf_exc.UnclaimableJob):
        board.claim(job, "bob")
    assert 0 < job.expires_in() <= 0.6


def test_consume_removes_the_job_for_good(database):
    board = _board(database)
    job = board.post("flow")
    board.claim(job, "alice")
    board.consume(job, "alice")
    assert job.state == tf_states.COMPLETE
    assert board.job_count == 0
    with pytest.raises(tf_exc.NotFound):
        board.claim(job, "bob")
    with pytest.raises(tf_exc.NotFound):
        board.consume(job, "alice")


def test_abandon_hands_the_job_back(database):
    board = _board(database)
    job = board.post("flow")
    with pytest.raises(tf_exc.NotFound):
        board.abandon(job, "alice")  # nobody owns it yet
    board.claim(job, "alice")
    board.abandon(job, "alice")
    assert job.state == tf_states.UNCLAIMED
    board.claim(job, "bob")
    assert board.find_owner(job) == "bob"


def test_trash_takes_the_job_off_the_board(database):
    board = _board(database)
    job = board.post("flow")
    board.claim(job, "alice")
    board.trash(job, "alice")
    assert job.state == tf_states.COMPLETE
    assert list(board.iterjobs()) == []


def test_wait_returns_posted_jobs_or_times_out(database):
    board = _board(database)
    with pytest.raises(tf_exc.NotFound):
        board.wait(timeout=0.2)
    threading.Timer(0.2, lambda: _board(database).post("late")).start()
    [job] = list(board.wait(timeout=10))
    assert job.name == "late"


def test_who_must_be_a_non_empty_string(database):
    board = _board(database)
    job = board.post("flow")
    with pytest.raises(ValueError):
        board.claim(job, "")
    with pytest.raises(TypeError):
        board.claim(job, None)


def test_two_boards_racing_from_threads_claim_each_job_exactly_once(database):
    posting = _board(database)
    jobs = [posting.post(f"flow-{i}") for i in range(40)]
    wins: dict[str, list[str]] = {"red": [], "blue": []}
    start = threading.Barrier(2)

    def race(who: str) -> None:
        board = _board(database)  # its own board object, as two conductors have
        start.wait()
        for job in board.iterjobs():
            try:
                board.claim(job, who)
            except tf_exc.UnclaimableJob:
                continue
            wins[who].append(job.uuid)

    threads = [threading.Thread(target=race, args=(who,)) for who in wins]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = wins["red"] + wins["blue"]
    assert sorted(claimed) == sorted(j.uuid for j in jobs)  # every job, none twice
    assert {posting.find_owner(j) for j in jobs} <= {"red", "blue"}
    for who, won in wins.items():
        assert all(posting.find_owner(j) == who for j in jobs if j.uuid in won)


def test_looking_at_the_board_waits_for_no_writer(database):
    """The board is read many times a second (each conductor's look, each job's state,
    each keep-alive): a read that took the write lock would queue behind every write,
    up to the busy timeout, and hold writers back in turn."""
    if database.dialect != "sqlite":
        pytest.skip("SQLite's write lock")
    board = _board(database)
    job = board.post("flow-1", details={"flow_uuid": "flow-1"})
    seen = {}

    def look():
        [listed] = list(board.iterjobs())
        seen["job"], seen["state"] = listed.uuid, listed.state
        seen["count"], seen["unclaimed"] = board.job_count, board.depth()["unclaimed"]
    assert ends_while_locked(database, look)
    assert seen == {"job": job.uuid, "state": tf_states.UNCLAIMED, "count": 1, "unclaimed": 1}


def test_a_look_at_the_board_is_one_read_and_a_stale_listing_loses_its_claim(database):
    """Each listed job's state comes from the listing (one query for the whole board,
    not one more a job); a job claimed after the listing is still offered, and the
    claim that follows fails, as a claim lost to a race does."""
    import sqlalchemy as sa

    board = _board(database)
    jobs = [board.post(f"flow-{i}") for i in range(5)]
    board.claim(jobs[1], "alice", expiry=60)
    selects = []

    def count(conn, cursor, statement, *_args):
        if statement.lstrip().upper().startswith("SELECT"):
            selects.append(statement)
    sa.event.listen(database.engine, "before_cursor_execute", count)
    try:
        listing = board.iterjobs(only_unclaimed=True)
        first = next(listing)
    finally:
        sa.event.remove(database.engine, "before_cursor_execute", count)
    assert len(selects) == 1
    board.claim(jobs[2], "bob", expiry=60)  # after the listing
    rest = list(listing)
    assert [j.uuid for j in [first, *rest]] == [jobs[i].uuid for i in (0, 2, 3, 4)]
    assert rest[0].state == tf_states.CLAIMED  # asked again, the row answers
    with pytest.raises(tf_exc.UnclaimableJob):
        board.claim(rest[0], "carol")
    assert board.find_owner(jobs[2]) == "bob"
