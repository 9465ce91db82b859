"""engine/conductor/claim_owners.py: only a provably dead owner's claims are released at once."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import pytest
from taskflow import states as tf_states

from fleetflow.engine.conductor import claim_owners
from fleetflow.engine.jobboard.sql import SqlJobBoard

pytestmark = pytest.mark.skipif(not claim_owners.proc_readable(),
                                reason="needs /proc to read process start times")


def _board(database):
    board = SqlJobBoard("b", {"claim_expiry": 300.0}, database)
    board.connect()
    return board


def _write_record(records, pid: int, start_time, names) -> None:
    os.makedirs(records.directory, exist_ok=True)
    with open(os.path.join(records.directory, f"{records.host}-{pid}.json"), "w") as f:
        json.dump({"host": records.host, "pid": pid, "start_time": start_time,
                   "names": names}, f)


def _exited_process() -> tuple[int, str]:
    """The pid and start time of a process that has exited (and was reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    start = claim_owners.process_start_time(proc.pid)
    proc.stdin.close()
    proc.wait(30)
    return proc.pid, start


def test_a_claim_of_an_exited_owner_is_released_and_its_record_dropped(database, tmp_path):
    board = _board(database)
    job = board.post("flow-1")
    board.claim(job, "old-0")
    records = claim_owners.OwnerRecords(str(tmp_path))
    pid, start = _exited_process()
    _write_record(records, pid, start, ["old-0", "old-1"])

    released = claim_owners.take_over_dead_claims(board, records, ["new-0"])

    assert released == [job.uuid]
    assert job.state == tf_states.UNCLAIMED
    board.claim(job, "new-0")  # at once, long before the 300 s claim would expire
    assert board.find_owner(job) == "new-0"
    assert records.records() == []


def test_a_recycled_pid_is_not_the_owner(database, tmp_path):
    board = _board(database)
    job = board.post("flow-1")
    board.claim(job, "old-0")
    records = claim_owners.OwnerRecords(str(tmp_path))
    # Our own pid, another start time: the owner was an earlier process under this pid.
    _write_record(records, os.getpid(), "1", ["old-0"])
    assert claim_owners.take_over_dead_claims(board, records, ["new-0"]) == [job.uuid]


def test_a_running_owner_keeps_its_claim(database, tmp_path):
    board = _board(database)
    job = board.post("flow-1")
    board.claim(job, "live-0")
    records = claim_owners.OwnerRecords(str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        _write_record(records, proc.pid, claim_owners.process_start_time(proc.pid),
                      ["live-0"])
        assert claim_owners.take_over_dead_claims(board, records, ["new-0"]) == []
    finally:
        proc.stdin.close()
        proc.wait(30)
    assert board.find_owner(job) == "live-0"
    assert len(records.records()) == 1


def test_an_owner_of_another_host_waits_for_its_expiry_and_says_when(database, tmp_path,
                                                                      caplog):
    board = _board(database)
    job = board.post("flow-1")
    board.claim(job, "far-0")
    records = claim_owners.OwnerRecords(str(tmp_path))
    pid, start = _exited_process()
    other = claim_owners.OwnerRecords(str(tmp_path), host="elsewhere")
    _write_record(other, pid, start, ["far-0"])  # dead there? we cannot know

    with caplog.at_level(logging.WARNING, logger=claim_owners.__name__):
        assert claim_owners.take_over_dead_claims(board, records, ["new-0"]) == []

    assert board.find_owner(job) == "far-0"
    [message] = [r.getMessage() for r in caplog.records]
    assert job.uuid in message and "far-0" in message
    assert "waits for that claim to expire at" in message and "UTC" in message


def test_register_and_unregister(tmp_path):
    records = claim_owners.OwnerRecords(str(tmp_path))
    records.register(["me-0", "me-1"])
    [(_path, record)] = records.records()
    assert (record["pid"], record["names"]) == (os.getpid(), ["me-0", "me-1"])
    assert record["start_time"] == claim_owners.process_start_time(os.getpid())
    dead, alive = records.owners()
    assert (dead, alive) == ({}, {"me-0", "me-1"})
    records.unregister()
    assert records.records() == []


def test_a_zombie_has_no_start_time():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    # Not reaped yet once it exits: a zombie, which is dead.
    deadline = time.monotonic() + 30
    while claim_owners.process_start_time(proc.pid) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.wait(30)
