"""8 processes x 250 writes against 3 hot providers, on PostgreSQL and on SQLite.

Every writer reads a consumer, then claims, changes or releases it with the
generation it read (sometimes deliberately a wrong one), shared consumers
included, so consumer and provider races really happen. Each write tags the
consumer with its own ``user_id``, which lets us tell afterwards which write
was the last to succeed. Checked:

- while the writers run and at the end, no provider is over capacity;
- each consumer's final allocations are what its last successful write said,
  and its generation equals the number of successful writes to it;
- every refused write was a 409 (generation conflict or capacity), nothing else.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import time
import uuid

import pytest
import sqlalchemy as sa

from fleetflow.persistence.db import Database
from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.allocations import ConsumerWrite
from fleetflow.persistence.placement.models import Allocation, Consumer
from fleetflow.persistence.placement.store import PlacementStore

WORKERS = 8
OPS = 250
PROVIDERS = [str(uuid.UUID(int=i + 1)) for i in range(3)]
CONSUMERS = [str(uuid.UUID(int=1000 + i)) for i in range(40)]
CAPACITY = 16  # VCPU per provider; 40 consumers want ~100 in all: many are refused


def _one_write(store, rng, tag):
    """Read-modify-write one or two consumers; returns the writes attempted."""
    chosen = rng.sample(CONSUMERS, 2 if rng.random() < 0.2 else 1)
    writes = []
    for consumer in chosen:
        current = store.get_allocations(consumer)
        generation = current.get("consumer_generation")
        if current["allocations"] and rng.random() < 0.4:
            new = {}  # the safe delete
        else:
            new = {rng.choice(PROVIDERS): {"VCPU": rng.randint(1, 4)}}
        if not current["allocations"] and not new:
            continue
        if rng.random() < 0.1:  # a writer with a stale belief
            generation = None if generation is not None else 1
        writes.append(ConsumerWrite(consumer, new, "proj", tag, generation))
    return writes


def worker(url: str, index: int, path: str) -> None:
    """One writer process: OPS writes, outcome of each appended to ``path``."""
    database = Database(url, pool_size=2, max_overflow=0)
    store = PlacementStore(database)
    rng = random.Random(index)
    outcomes = []
    for op in range(OPS):
        tag = f"w{index}-{op}"
        writes = _one_write(store, rng, tag)
        if not writes:
            continue
        record = {"tag": tag, "writes": {w.consumer_uuid: w.allocations for w in writes}}
        try:
            store.set_allocations(writes)
            record["outcome"] = "ok"
        except errors.PlacementConflict as exc:
            record.update(outcome=type(exc).__name__, status=exc.status, code=exc.code)
        except Exception as exc:  # noqa: BLE001 - anything else is a failure to report
            record.update(outcome="error", error=repr(exc))
        outcomes.append(record)
    database.dispose()
    with open(path, "w") as out:
        json.dump(outcomes, out)


def over_capacity(database) -> dict:
    with database.session() as session:
        used = session.execute(
            sa.select(Allocation.resource_provider_uuid, sa.func.sum(Allocation.used))
            .group_by(Allocation.resource_provider_uuid)).all()
    return {rp: int(total) for rp, total in used if total > CAPACITY}


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'placement.db'}"
    return request.getfixturevalue("pg_url")


def test_concurrent_writers_never_overcommit_or_lose_writes(database_url, tmp_path):
    database = Database(database_url)
    database.upgrade()
    store = PlacementStore(database)
    for i, rp in enumerate(PROVIDERS):
        store.create_provider(f"hot-{i}", rp)
        store.set_inventories(rp, 0, {"VCPU": {"total": CAPACITY}})
    database.dispose()  # no pooled connection may cross the fork

    ctx = multiprocessing.get_context("fork")
    paths = [str(tmp_path / f"worker-{i}.json") for i in range(WORKERS)]
    procs = [ctx.Process(target=worker, args=(database_url, i, paths[i]))
             for i in range(WORKERS)]
    for proc in procs:
        proc.start()
    checks = 0
    while any(proc.is_alive() for proc in procs):
        assert over_capacity(database) == {}
        checks += 1
        time.sleep(0.05)
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    assert over_capacity(database) == {}
    assert checks > 0

    records = [r for path in paths for r in json.load(open(path))]
    errors_seen = [r for r in records if r["outcome"] == "error"]
    assert errors_seen == []
    refused = [r for r in records if r["outcome"] != "ok"]
    assert all(r["status"] == 409 for r in refused)
    assert {r["code"] for r in refused} <= {"placement.concurrent_update",
                                            "placement.allocation.capacity_exceeded"}
    # Both kinds of refusal really happened, and so did many successes.
    outcomes = {r["outcome"] for r in records}
    assert {"ok", "ConsumerGenerationConflict", "CapacityExceeded"} <= outcomes

    successes: dict[str, dict[str, dict]] = {}
    for r in records:
        if r["outcome"] == "ok":
            for consumer, allocations in r["writes"].items():
                successes.setdefault(consumer, {})[r["tag"]] = allocations
    with database.session() as session:
        rows = session.execute(sa.select(Consumer.uuid, Consumer.user_id,
                                         Consumer.generation)).all()
    for consumer, last_tag, generation in rows:
        # The write that tagged the consumer last must be one that succeeded ...
        assert last_tag in successes[consumer], (consumer, last_tag)
        # ... the consumer holds exactly what it wrote ...
        held = store.get_allocations(consumer)["allocations"]
        assert {rp: e["resources"] for rp, e in held.items()} == \
            successes[consumer][last_tag]
        # ... and every success, and only those, bumped the generation.
        assert generation == len(successes[consumer])
    assert {c for c, *_ in rows} == set(successes)
    database.dispose()


def test_first_writer_claims_on_new_emptied_and_held_consumers(database_url):
    """A null generation creates a consumer, re-uses an emptied one, and is
    refused for one that holds allocations, all or nothing over a batch."""
    database = Database(database_url)
    database.upgrade()
    store = PlacementStore(database)
    rp = PROVIDERS[0]
    store.create_provider("claims", rp)
    store.set_inventories(rp, 0, {"VCPU": {"total": 4, "max_unit": 2}})
    held, fresh = str(uuid.uuid4()), str(uuid.uuid4())

    store.put_allocations(held, {rp: {"VCPU": 1}}, "p", "u")
    assert store.get_allocations(held)["consumer_generation"] == 1
    with pytest.raises(errors.ConsumerGenerationConflict):
        store.put_allocations(held, {rp: {"VCPU": 1}}, "p", "u")
    with pytest.raises(errors.ConsumerGenerationConflict):
        store.set_allocations([ConsumerWrite(fresh, {rp: {"VCPU": 1}}, "p", "u"),
                               ConsumerWrite(held, {rp: {"VCPU": 1}}, "p", "u")])
    assert store.get_allocations(fresh) == {"allocations": {}}

    store.delete_allocations(held)
    with pytest.raises(errors.ConsumerNotFound):
        store.delete_allocations(held)
    store.put_allocations(held, {rp: {"VCPU": 2}}, "p", "u")
    body = store.get_allocations(held)
    assert body["allocations"][rp]["resources"] == {"VCPU": 2}
    assert body["consumer_generation"] == 3  # created, emptied, claimed again
    # inventory, claim, claim: a release (DELETE) bumps none, as in Placement
    assert body["allocations"][rp]["generation"] == 3

    with pytest.raises(errors.ConstraintViolated):
        store.put_allocations(fresh, {rp: {"VCPU": 3}}, "p", "u")
    store.put_allocations(fresh, {rp: {"VCPU": 2}}, "p", "u")
    with pytest.raises(errors.CapacityExceeded):
        store.put_allocations(str(uuid.uuid4()), {rp: {"VCPU": 1}}, "p", "u")
    assert store.get_provider(rp)["generation"] == 4
    database.dispose()


def test_a_write_of_no_consumers_changes_nothing(database_url):
    database = Database(database_url)
    database.upgrade()
    store = PlacementStore(database)
    store.create_provider("idle", PROVIDERS[0])
    store.set_allocations([])
    assert store.get_provider(PROVIDERS[0])["generation"] == 0
    database.dispose()
