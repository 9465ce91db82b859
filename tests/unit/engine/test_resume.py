"""Resume from checkpoint: a flow stopped half way is finished by another conductor."""

from __future__ import annotations

import time

from taskflow import states as tf_states

from fleetflow.engine import submit as submit_mod
from fleetflow.engine.conductor.pool import ConductorPool


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def test_a_stopped_conductor_hands_over_and_nothing_done_runs_again(
        engine_conf, board, memory_backend, effects_log):
    flow_id = submit_mod.submit(board, memory_backend, "toy-linear",
                                {"count": 5, "sleep": 0.3})
    first = ConductorPool(engine_conf, workers=1, name="first",
                          persistence=memory_backend, wait_timeout=0.05)
    first.start()
    _wait(lambda: len(effects_log("execute")) >= 2)
    # A graceful stop suspends the engine at the next atom boundary and
    # abandons the job (what SIGTERM does to `fleetflow conductor`).
    first.stop()
    status = submit_mod.load_status(memory_backend, flow_id)
    assert status["state"] == tf_states.SUSPENDED
    done_before = [a for _, a, _ in effects_log("execute")]
    assert 2 <= len(done_before) < 5
    assert board.job_count == 1  # abandoned, not consumed

    with ConductorPool(engine_conf, workers=1, name="second", persistence=memory_backend,
                       wait_timeout=0.05):
        _wait(lambda: submit_mod.load_status(memory_backend, flow_id)["state"]
              == tf_states.SUCCESS)
    executed = [a for _, a, _ in effects_log("execute")]
    assert sorted(executed) == [f"inst-000{i}-step" for i in range(5)]  # each exactly once
    tokens = {atom: token for _, atom, token in effects_log("execute")}
    assert {tokens[a] for a in done_before} == {1}
    assert {tokens[a] for a in executed if a not in done_before} == {2}
    assert board.job_count == 0


def test_a_process_restart_picks_up_unfinished_jobs(engine_conf, board, memory_backend,
                                                    effects_log):
    # Jobs posted while no conductor ran (a stopped `fleetflow serve`) are
    # found by the next start, from the database alone.
    flow_ids = [submit_mod.submit(board, memory_backend, "toy-linear", {"count": 2})
                for _ in range(3)]
    with ConductorPool(engine_conf, workers=2, persistence=memory_backend, wait_timeout=0.05):
        _wait(lambda: all(submit_mod.load_status(memory_backend, f)["state"]
                          == tf_states.SUCCESS for f in flow_ids))
    assert len(effects_log("execute")) == 6
