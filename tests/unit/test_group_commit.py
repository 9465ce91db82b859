"""Group commit: concurrent writers share transactions, return only once committed."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from fleetflow.common import states
from fleetflow.persistence import fleet, reservations
from fleetflow.persistence.group_commit import GroupCommit


class Recorder:
    """A stand-in transaction: records each committed batch; the first can be held."""

    def __init__(self, fail_on=()):
        self.batches: list[list] = []
        self.hold_first = threading.Event()
        self.in_first = threading.Event()
        self.fail_on = set(fail_on)

    @contextlib.contextmanager
    def transaction(self):
        pending = []
        yield pending
        if not self.batches and not self.in_first.is_set():
            self.in_first.set()
            self.hold_first.wait(10)
        if self.fail_on & set(pending):
            raise ValueError(f"refused {sorted(self.fail_on & set(pending))}")
        self.batches.append(pending)

    @staticmethod
    def apply(connection, items):
        connection.extend(items)


def _queued(group: GroupCommit) -> int:
    with group._lock:
        return len(group._queue)


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def _writers(group, items, outcomes):
    def write(item):
        try:
            group.write(item)
            outcomes[item] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            outcomes[item] = exc

    threads = [threading.Thread(target=write, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    return threads


def _queued_behind_first(recorder, group, items) -> dict:
    """Write "first" and hold its commit while ``items`` queue; let go; the outcomes."""
    outcomes: dict = {}
    first = _writers(group, ["first"], outcomes)
    assert recorder.in_first.wait(10)
    rest = _writers(group, items, outcomes)
    _wait_for(lambda: _queued(group) == len(items))
    # Nobody returns before its item is committed.
    assert outcomes == {}
    recorder.hold_first.set()
    for thread in first + rest:
        thread.join(10)
    return outcomes


def test_writers_arriving_during_a_commit_share_the_next_one():
    recorder = Recorder()
    group = GroupCommit(recorder.transaction, recorder.apply)
    outcomes = _queued_behind_first(recorder, group, list(range(30)))
    assert outcomes == {item: "ok" for item in ["first", *range(30)]}
    assert recorder.batches == [["first"], list(range(30))]
    assert group.batches == 2


def test_a_lone_writer_commits_at_once():
    recorder = Recorder()
    recorder.hold_first.set()
    group = GroupCommit(recorder.transaction, recorder.apply)
    for item in range(3):
        group.write(item)
        assert recorder.batches[-1] == [item]


def test_a_failed_batch_fails_only_the_writer_whose_item_failed():
    recorder = Recorder(fail_on={7})
    group = GroupCommit(recorder.transaction, recorder.apply)
    outcomes = _queued_behind_first(recorder, group, list(range(10)))
    assert isinstance(outcomes.pop(7), ValueError)
    assert outcomes == {item: "ok" for item in ["first", *[i for i in range(10) if i != 7]]}
    committed = sorted(item for batch in recorder.batches for item in batch if item != "first")
    assert committed == [i for i in range(10) if i != 7]


def test_a_lone_failure_raises_its_own_error():
    recorder = Recorder(fail_on={"bad"})
    recorder.hold_first.set()
    group = GroupCommit(recorder.transaction, recorder.apply)
    with pytest.raises(ValueError, match="bad"):
        group.write("bad")
    group.write("good")
    assert recorder.batches == [["good"]]


def test_concurrent_instance_writes_are_all_stored(db):
    with db.session() as s:
        fleet.load(s, fleet.expand(fleet.read()))
        rid = reservations.create(s, tenant_id="t1", user_id=None, name="g",
                                  policy=states.ALL_OR_NOTHING, request={}, count=40,
                                  flavor_id="1", image_id="img", group_id=None).id
        ids = reservations.instance_ids(s, rid)
    start = threading.Barrier(len(ids))

    def boot(index, instance_id):
        start.wait()
        reservations.write_instance(db, instance_id, host=f"h{index}", status=states.ACTIVE,
                                    task_state=None, fault=None)
        # Committed on return: a fresh session sees it.
        with db.session() as s:
            assert reservations.instances(s, rid)[index].status == states.ACTIVE

    threads = [threading.Thread(target=boot, args=(i, iid)) for i, iid in enumerate(ids)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    with db.session() as s:
        rows = reservations.instances(s, rid)
    assert [(r.status, r.host, r.task_state) for r in rows] == [
        (states.ACTIVE, f"h{i}", None) for i in range(len(ids))]
