"""engine/conductor/keepalive.py: claim extensions, lost claims, and the lease they give."""

from __future__ import annotations

import threading

import pytest

from fleetflow.engine.conductor import keepalive
from fleetflow.engine.fencing import FencedBackend, StaleCheckpoint
from fleetflow.persistence import fences


class Board:
    """A board whose extend_claim answers what the test says; counts calls."""

    def __init__(self):
        self.ours = True
        self.calls = 0

    def extend_claim(self, job, who, expiry):
        self.calls += 1
        return self.ours


class Job:
    uuid = "job-1"
    name = "flow-1"


class Engine:
    suspended = 0

    def suspend(self):
        self.suspended += 1


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(keepalive, "_now", lambda: now[0])
    return now


def test_holding_extends_at_once_and_gives_a_lease_for_half_the_expiry(clock):
    board = Board()
    alive = keepalive.ClaimKeepAlive(board, "me", interval=1.0, expiry=10.0)
    alive.hold(Job())
    assert board.calls == 1
    assert alive.lease_valid("job-1")
    clock[0] += 4.9
    assert alive.lease_valid("job-1")
    clock[0] += 0.2  # 5.1 s: past half the expiry, the database must be asked
    assert not alive.lease_valid("job-1")
    alive.extend_now()
    assert alive.lease_valid("job-1")
    assert not alive.lease_valid("another-job")


def test_a_lost_claim_suspends_the_engine_and_ends_the_lease(clock):
    board = Board()
    alive = keepalive.ClaimKeepAlive(board, "me", interval=1.0, expiry=10.0)
    engine = Engine()
    alive.hold(Job())
    alive.attach_engine(Job(), engine)
    board.ours = False
    alive.extend_now()
    assert engine.suspended == 1
    assert alive.lost(Job()) and not alive.lease_valid("job-1")
    assert alive.release(Job()) is True
    assert alive.held() == []


def test_a_board_error_is_not_a_lost_claim(clock):
    class Flaky(Board):
        def extend_claim(self, job, who, expiry):
            raise ConnectionError("redis failover")

    alive = keepalive.ClaimKeepAlive(Flaky(), "me", interval=1.0, expiry=10.0)
    engine = Engine()
    alive.hold(Job())
    alive.attach_engine(Job(), engine)
    alive.extend_now()
    assert engine.suspended == 0 and not alive.lost(Job())
    assert not alive.lease_valid("job-1")  # never confirmed: the database decides


def test_fenced_backend_skips_the_lookup_only_under_a_lease(database, memory_backend):
    with database.session() as session:
        old = fences.advance(session, "flow-y", "old")
        fences.advance(session, "flow-y", "new")
    lease = [True]
    fenced = FencedBackend(memory_backend, database, old, lease=lambda: lease[0])
    fenced.check()  # trusted: a fresh claim extension proves nobody else has the job
    lease[0] = False
    with pytest.raises(StaleCheckpoint):
        fenced.check()


def test_a_failure_or_a_revert_is_checked_against_the_fence_even_under_a_lease(
        database, memory_backend):
    from taskflow import states as tf_states
    from taskflow.persistence import models as tf_models

    with database.session() as session:
        old = fences.advance(session, "flow-z", "old")
    fenced = FencedBackend(memory_backend, database, old, lease=lambda: True)
    book = tf_models.LogBook("b", uuid="flow-z")
    flow = tf_models.FlowDetail("f", uuid="flow-z")
    task = tf_models.TaskDetail("t", uuid="task-z")
    flow.add(task)
    book.add(flow)
    conn = fenced.get_connection()
    conn.save_logbook(book)
    # A newer owner took the fence while our claim extension still looked fresh.
    with database.session() as session:
        fences.advance(session, "flow-z", "new")
    task.state, task.intention = tf_states.SUCCESS, tf_states.EXECUTE
    conn.update_atom_details_many([task])  # progress: trusted on the lease's word
    task.state = tf_states.FAILURE
    with pytest.raises(StaleCheckpoint):
        conn.update_atom_details_many([task])
    task.state, task.intention = tf_states.PENDING, tf_states.REVERT
    with pytest.raises(StaleCheckpoint):
        conn.update_atom_details(task)
    flow.state = tf_states.REVERTING
    with pytest.raises(StaleCheckpoint):
        conn.update_flow_details(flow)
    stored = memory_backend.get_connection()
    assert stored.get_atom_details("task-z").state == tf_states.SUCCESS
    assert stored.get_flow_details("flow-z").state != tf_states.REVERTING


class Posting:
    """A job of :class:`ForgetfulBoard`."""

    def __init__(self, uuid, name="flow-1"):
        self.uuid, self.name = uuid, name
        self.details = {"flow_uuid": name}
        self.book_uuid, self.book_name = name, f"toy-{name}"


class ForgetfulBoard:
    """A board that lost its jobs (a Redis restarted empty): claims, posts, owners."""

    def __init__(self):
        self.jobs: dict[str, Posting] = {}
        self.owners: dict[str, str] = {}
        self.posted = 0

    def extend_claim(self, job, who, expiry):
        return job.uuid in self.jobs and self.owners.get(job.uuid) == who

    def job_exists(self, job):
        return job.uuid in self.jobs

    def iterjobs(self, ensure_fresh=False):
        return list(self.jobs.values())

    def find_owner(self, job):
        return self.owners.get(job.uuid)

    def post(self, name, book=None, details=None):
        self.posted += 1
        job = Posting(f"job-new-{self.posted}", name)
        assert (book.uuid, book.name) == (name, f"toy-{name}")
        self.jobs[job.uuid] = job
        return job

    def claim(self, job, who, expiry=None):
        from taskflow import exceptions as tf_exc

        if self.owners.setdefault(job.uuid, who) != who:
            raise tf_exc.UnclaimableJob(f"{job.uuid} is {self.owners[job.uuid]}'s")


def _held_on(board):
    job = Posting("job-1")
    board.jobs[job.uuid], board.owners[job.uuid] = job, "me"
    return job


def test_a_job_the_board_lost_is_posted_again_claimed_and_carried_on(clock):
    board = ForgetfulBoard()
    job = _held_on(board)
    alive = keepalive.ClaimKeepAlive(board, "me", interval=1.0, expiry=10.0)
    engine = Engine()
    alive.hold(job)
    alive.attach_engine(job, engine)
    board.jobs.clear()
    board.owners.clear()  # the board restarted empty
    clock[0] += 6.0
    alive.extend_now()
    assert engine.suspended == 0 and not alive.lost(job)
    replacement = alive.current(job)
    assert replacement.uuid == "job-new-1" and board.owners[replacement.uuid] == "me"
    # A re-post may have raced ours: checkpoints look the fence up from now on.
    assert not alive.lease_valid("job-1")
    alive.extend_now()
    assert board.posted == 1  # kept up, not posted again
    assert alive.release(job) is False


def test_a_job_already_reposted_is_claimed_rather_than_posted_twice(clock):
    board = ForgetfulBoard()
    job = _held_on(board)
    alive = keepalive.ClaimKeepAlive(board, "me", interval=1.0, expiry=10.0)
    alive.hold(job)
    board.jobs.clear()
    reposted = Posting("job-reconciled")
    board.jobs[reposted.uuid] = reposted  # the reconciler was first
    alive.extend_now()
    assert alive.current(job) is reposted and board.posted == 0


def test_a_replacement_someone_else_claimed_is_a_lost_claim(clock):
    board = ForgetfulBoard()
    job = _held_on(board)
    alive = keepalive.ClaimKeepAlive(board, "me", interval=1.0, expiry=10.0)
    engine = Engine()
    alive.hold(job)
    alive.attach_engine(job, engine)
    board.jobs.clear()
    reposted = Posting("job-reconciled")
    board.jobs[reposted.uuid], board.owners[reposted.uuid] = reposted, "rival"
    alive.extend_now()
    assert engine.suspended == 1 and alive.lost(job)
    assert alive.current(job) is job


def test_a_job_released_and_consumed_during_an_extension_is_not_posted_again(clock):
    """The conductor releases a job, then consumes it: an extension in flight
    meanwhile must not find the job gone and post a replacement of an ended flow."""
    class SlowBoard(ForgetfulBoard):
        def __init__(self):
            super().__init__()
            self.inside, self.go = threading.Event(), threading.Event()

        def extend_claim(self, job, who, expiry):
            self.inside.set()
            assert self.go.wait(10)
            return job.uuid in self.jobs

    board = SlowBoard()
    job = _held_on(board)
    alive = keepalive.ClaimKeepAlive(board, "me", interval=1.0, expiry=10.0)
    board.go.set()
    alive.hold(job)
    board.go.clear()
    board.inside.clear()
    extending = threading.Thread(target=alive.extend_now)
    extending.start()
    assert board.inside.wait(10)

    def finish():  # what the conductor does once its run is over
        alive.release(job)
        board.jobs.pop(job.uuid)
        board.owners.pop(job.uuid)

    finishing = threading.Thread(target=finish)
    finishing.start()
    finishing.join(1.0)  # released at once without the wait: consumed mid-extension
    board.go.set()
    extending.join(10)
    finishing.join(10)
    assert not extending.is_alive() and not finishing.is_alive()
    assert board.posted == 0 and board.jobs == {}


def test_a_round_that_listed_a_job_since_released_leaves_it_alone(clock):
    board = ForgetfulBoard()
    job = _held_on(board)
    alive = keepalive.ClaimKeepAlive(board, "me", interval=1.0, expiry=10.0)
    alive.hold(job)
    listed = alive._held[job.uuid]
    alive.release(job)
    board.jobs.clear()
    board.owners.clear()  # consumed
    alive._extend(listed)
    assert board.posted == 0 and board.jobs == {}
