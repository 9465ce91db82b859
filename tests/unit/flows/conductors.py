"""Conductor threads for a flow test: run a flow on a board until it reaches a state."""

from __future__ import annotations

import time

from fleetflow.engine import actions
from fleetflow.engine.conductor import pool, worker
from fleetflow.flows.status_listener import ReservationStatusListener
from fleetflow.plugin import flow_meta


def runner(cloud, board, backend, timeout: float):
    """``run_until(flow_id, *states)``: one conductor thread runs the board's jobs (an
    engine with the reservation status listener, as ``fleetflow serve`` has) until the
    flow is in one of ``states`` with no job left; fails after ``timeout`` seconds."""

    def engine_with_status(flow_detail, store, backend_, conf):
        engine = worker.default_engine_factory(flow_detail, store, backend_, conf)
        ReservationStatusListener(
            engine, cloud.database,
            paused=lambda: flow_meta.is_paused(engine.storage.flow_meta)).register()
        return engine

    def run_until(flow_id, *wanted):
        deadline = time.monotonic() + timeout
        with pool.ConductorPool(cloud.conf, workers=1, persistence=backend,
                                          engine_factory=engine_with_status,
                                          wait_timeout=0.05):
            while True:
                state = actions.show_flow(backend, flow_id)["state"]
                if state in wanted and board.job_count == 0:
                    return state
                assert time.monotonic() < deadline, f"flow stuck in {state}"
                time.sleep(0.05)

    return run_until
