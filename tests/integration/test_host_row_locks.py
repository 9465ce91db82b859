"""Writers of several host rows and a build's claim never deadlock on PostgreSQL.

A claim reads its hosts' rows ``FOR SHARE`` in name order; an agent's heartbeat
updates all of its hosts at once. Were the heartbeat to take the rows in the
table's own order, a claim holding one host and wanting another could wait on
a heartbeat waiting on it: PostgreSQL then aborts one of them (a claim lost to
a deadlock reverts its reservation). Here the two really overlap, in two
connections, in the order that closes the cycle.
"""

from __future__ import annotations

import threading

import pytest

from fleetflow.common import states
from fleetflow.persistence import evacuations
from fleetflow.persistence.db import Database
from fleetflow.persistence.models import Host

pytestmark = pytest.mark.services


@pytest.fixture
def database(pg_url):
    database = Database(pg_url)
    database.upgrade()
    with database.session() as session:
        # Stored h2 first: an UPDATE of both meets h2 first.
        for name in ("h2", "h1"):
            session.add(Host(uuid=f"uuid-{name}", name=name, region="na", zone="z",
                             rack="r", state=states.HOST_UP, inventory={}))
    yield database
    database.dispose()


@pytest.mark.parametrize("writer", ["heartbeat", "release"])
def test_a_claim_and_a_writer_of_both_hosts_both_commit(database, writer):
    with database.session() as session:
        session.execute(Host.__table__.update().values(evacuation_id="e-1", heartbeat_at=None))
    claim_holds_h1, writer_started = threading.Event(), threading.Event()
    errors = []

    def claim():
        try:
            with database.session() as session:
                evacuations.closed_to_builds(session, ["h1"])
                claim_holds_h1.set()
                assert writer_started.wait(30)
                # Give the writer time to take what it can before we ask for h2.
                threading.Event().wait(0.5)
                evacuations.closed_to_builds(session, ["h2"])
        except Exception as exc:  # noqa: BLE001 - the test reports what failed
            errors.append(("claim", exc))

    def write():
        assert claim_holds_h1.wait(30)
        writer_started.set()
        try:
            with database.session() as session:
                if writer == "heartbeat":
                    evacuations.heartbeat(session, ["h2", "h1"])
                else:
                    evacuations.release_hosts(session, "e-1")
        except Exception as exc:  # noqa: BLE001
            errors.append((writer, exc))

    threads = [threading.Thread(target=claim), threading.Thread(target=write)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    with database.session() as session:
        rows = session.execute(Host.__table__.select()).all()
    if writer == "heartbeat":
        assert all(row.heartbeat_at is not None for row in rows)
    else:
        assert all(row.evacuation_id is None for row in rows)
