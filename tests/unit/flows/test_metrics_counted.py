"""Metrics counted where their events happen: a reservation run by a conductor, then scraped.

The scrape is Prometheus' text format read back with its own parser, so what is
asserted is what a Prometheus server would store.
"""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from taskflow import exceptions as tf_exc
from taskflow.persistence import backends as tf_backends

from fleetflow.common import metrics
from fleetflow.engine import submit as submit_mod
from fleetflow.engine import taskflow_retry_fix
from fleetflow.engine.jobboard.boards import make_jobboard
from fleetflow.services import metrics_readers
from tests.unit.flows import conductors as conductor_threads


@pytest.fixture(params=["fleetflow-parallel"])
def fleetflow_engine(request):
    # One engine: what is counted is the conductor's, not the engine's.
    return request.param


def scraped(text: str | None = None) -> dict[tuple, float]:
    """``{(sample name, sorted labels): value}`` of a scrape."""
    text = text if text is not None else metrics.exposition().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def total(samples: dict, name: str, **labels) -> float:
    return sum(value for (sample, found), value in samples.items() if sample == name
               and all((k, v) in found for k, v in labels.items()))


@pytest.fixture
def board_and_backend(cloud):
    taskflow_retry_fix.apply()
    backend = tf_backends.fetch({"connection": "memory://"})
    board = make_jobboard(cloud.conf, backend)
    yield board, backend
    for key in ("flows", "jobboard", "hosts"):
        metrics.unregister_reader(key)
    board.close()
    backend.close()


def test_a_reservation_counts_its_atoms_and_claims(cloud, board_and_backend):
    board, backend = board_and_backend
    run_until = conductor_threads.runner(cloud, board, backend, timeout=60)
    before = scraped()
    _rid, job = cloud.reserve(2)
    flow_id = submit_mod.submit(board, backend, job["flow"], job["kwargs"], store=job["store"],
                                owner_tenant="t1")
    metrics_readers.register(cloud.conf, cloud.database, backend=backend, board=board)
    waiting = scraped()
    assert total(waiting, "fleetflow_jobboard_jobs", state="unclaimed") == 1
    assert total(waiting, "fleetflow_flows", kind="provision", state="PENDING") == 1

    assert run_until(flow_id, "SUCCESS") == "SUCCESS"

    after = scraped()
    executed = (total(after, "fleetflow_atoms_total", kind="task", outcome="executed")
                - total(before, "fleetflow_atoms_total", kind="task", outcome="executed"))
    # Per instance at least a claim, a boot and a wait, and the reservation's own tasks.
    assert executed >= 2 * 3
    assert (total(after, "fleetflow_atoms_total", kind="retry", outcome="executed")
            - total(before, "fleetflow_atoms_total", kind="retry", outcome="executed")) >= 2
    assert total(after, "fleetflow_atoms_total", outcome="failed") == \
        total(before, "fleetflow_atoms_total", outcome="failed")
    assert (total(after, "fleetflow_claims_total", board=board.name)
            - total(before, "fleetflow_claims_total", board=board.name)) == 1
    assert total(after, "fleetflow_flows", kind="provision", state="SUCCESS") == 1
    assert total(after, "fleetflow_flows", kind="provision", state="PENDING") == 0
    assert total(after, "fleetflow_jobboard_jobs", state="unclaimed") == 0
    assert total(after, "fleetflow_hosts", state="up") == len(cloud.driver.hosts)


def test_a_claim_lost_to_another_conductor_is_a_conflict(cloud, board_and_backend):
    board, _backend = board_and_backend
    job = board.post("flow-x", details={"flow_uuid": "flow-x"})
    before = total(scraped(), "fleetflow_claim_conflicts_total", board=board.name)
    board.claim(job, "first")
    with pytest.raises(tf_exc.UnclaimableJob):
        board.claim(job, "second")
    assert total(scraped(), "fleetflow_claim_conflicts_total", board=board.name) == before + 1
    # The owner renewing its claim is no conflict.
    assert board.extend_claim(job, "first")
    assert total(scraped(), "fleetflow_claim_conflicts_total", board=board.name) == before + 1
    metrics_readers.register(cloud.conf, cloud.database, board=board)
    assert total(scraped(), "fleetflow_jobboard_jobs", state="claimed") == 1


def test_a_standalone_process_serves_metrics_on_its_port(cloud):
    from fleetflow.cli.startup import start_metrics

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cloud.conf.set_override("port", port, group="metrics")
    try:
        server = start_metrics(cloud.conf, cloud.database)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as got:
                text = got.read().decode()
        finally:
            server.shutdown()
    finally:
        cloud.conf.clear_override("port", group="metrics")
        metrics.unregister_reader("hosts")
    samples = scraped(text)
    assert total(samples, "fleetflow_hosts") == len(cloud.driver.hosts)
    assert ("fleetflow_reschedules_total", ()) in samples
