"""Choosing a jobboard: ``[jobboard] backend = sql | redis``.

Both boards implement TaskFlow's ``JobBoard`` plus
``extend_claim(job, who) -> bool``, ``job_exists(job) -> bool`` and
``claim_expiry``, which the conductor's keep-alive relies on
(engine/conductor/keepalive.py).
"""

from __future__ import annotations

from fleetflow.engine.jobboard.redis import ExpiringRedisJobBoard, make_client
from fleetflow.engine.jobboard.sql import SqlJobBoard
from fleetflow.persistence.db import get_database


def make_jobboard(conf, persistence=None, connect: bool = True):
    """A new (connected) jobboard for ``conf``; each conductor worker gets its own.

    ``persistence`` is the TaskFlow backend jobs load their logbooks from
    (engine/backend.py ``get_backend``).
    """
    group = conf.jobboard
    options = {"claim_expiry": float(group.claim_expiry)}
    if group.backend == "sql":
        board = SqlJobBoard(group.board_name, options, get_database(conf),
                            persistence=persistence)
    elif group.backend == "redis":
        options["namespace"] = group.board_name.encode()
        board = ExpiringRedisJobBoard(group.board_name, options,
                                      client=make_client(group.redis_url),
                                      persistence=persistence)
    else:  # oslo.config's choices make this unreachable from configuration
        raise ValueError(f"unknown jobboard backend {group.backend!r}")
    if connect:
        board.connect()
    return board
