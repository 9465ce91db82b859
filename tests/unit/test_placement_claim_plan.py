"""The claim's provider bump is searched by index, not scanned (SQLite's query plan).

The bump compare-and-swaps every touched provider's generation and checks the
new allocations against inventory in one UPDATE. Planned the wrong way it
scanned every provider of the cloud, and looked up every claimed consumer for
each: a claim of 10,000 instances on 2,000 hosts took 8.5 s of CPU (bench:
``persistence/placement`` claims in bench/RESULTS.md). The plan is the
property that keeps it linear, so the plan is what is asserted.
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from fleetflow.persistence.placement.store import PlacementStore


def test_a_claim_of_many_searches_providers_and_allocations_by_index(db):
    store = PlacementStore(db)
    hosts = []
    for i in range(20):
        host = store.create_provider(f"host-{i:02d}")["uuid"]
        store.set_inventories(host, 0, {"VCPU": {"total": 64}})
        hosts.append(host)
    bumps = []

    @sa.event.listens_for(db.engine, "before_cursor_execute")
    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("UPDATE resource_providers SET generation"):
            bumps.append((statement, parameters))

    claims = {str(uuid.uuid4()): {hosts[i % 4]: {"VCPU": 1}} for i in range(12)}
    store.claim_many(claims, "p", "u")
    sa.event.remove(db.engine, "before_cursor_execute", capture)

    assert len(bumps) == 1
    statement, parameters = bumps[0]
    raw = db.engine.raw_connection()
    try:
        plan = [row[3] for row in raw.cursor().execute("EXPLAIN QUERY PLAN " + statement,
                                                       parameters).fetchall()]
    finally:
        raw.close()
    assert not any(step.startswith("SCAN resource_providers") for step in plan), plan
    searches = [step for step in plan if step.startswith("SEARCH mine")]
    assert searches and all("resource_provider_uuid=?" in step and "consumer_uuid" not in step
                            for step in searches), plan
    # And the claim holds: four providers, three consumers each.
    used = store.usages_by_provider()
    assert sorted(used[h]["VCPU"] for h in hosts[:4]) == [3, 3, 3, 3]
