"""Flow listings say when each flow last made progress (engine/flow_progress.py)."""

from __future__ import annotations

import datetime as dt
import time

from taskflow import states as tf_states

from fleetflow.engine import actions
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.pool import ConductorPool
from fleetflow.engine.jobboard.boards import make_jobboard
from fleetflow.persistence.logbook.backend import LogbookBackend


def test_list_and_show_give_the_last_write_and_the_last_checkpoint(engine_conf, database):
    backend = LogbookBackend({"connection": database.url}, engine=database.engine)
    board = make_jobboard(engine_conf, backend)
    try:
        before = dt.datetime.now(dt.UTC)
        flow_id = submit_mod.submit(board, backend, "toy-linear", {"count": 2})
        [listed], _ = actions.list_flows(backend)
        assert listed["last_progress_at"] == listed["updated_at"]  # no atom yet
        with ConductorPool(engine_conf, workers=1, persistence=backend, wait_timeout=0.05):
            deadline = time.monotonic() + 30
            while actions.show_flow(backend, flow_id)["state"] != tf_states.SUCCESS:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        shown = actions.show_flow(backend, flow_id)
    finally:
        board.close()
    updated = dt.datetime.fromisoformat(shown["updated_at"])
    progress = dt.datetime.fromisoformat(shown["last_progress_at"])
    assert before - dt.timedelta(seconds=1) <= updated <= progress
    assert progress <= dt.datetime.now(dt.UTC)
    [listed], _ = actions.list_flows(backend, state=tf_states.SUCCESS)
    assert (listed["updated_at"], listed["last_progress_at"]) == (shown["updated_at"],
                                                                  shown["last_progress_at"])


def test_a_backend_without_times_answers_none(board, memory_backend):
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear", {"count": 1})
    shown = actions.show_flow(memory_backend, flow_id)
    assert (shown["updated_at"], shown["last_progress_at"]) == (None, None)
