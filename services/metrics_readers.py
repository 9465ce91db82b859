"""The gauges a fleetflow process reports at each scrape: what is, rather than what happened.

Counters are incremented where their events happen (common/metrics.py); a state
is read when Prometheus asks, by the readers registered here, so nothing
polls between scrapes and the hot paths pay nothing:

- ``fleetflow_flows{kind, state}``: the flows of the logbook by kind (the
  registered flow's name: provision, evacuate ...) and state (one query);
- ``fleetflow_hosts{state}``: compute hosts by effective state (one query);
- ``fleetflow_jobboard_jobs{board, state}`` (claimed, unclaimed) and
  ``fleetflow_jobboard_unclaimed_age_seconds{board}``: the age of the job
  waiting longest for a conductor (0 when none waits).

Every process that does work registers the readers of what it can see
(``fleetflow serve`` and ``fleetflow conductor`` all three; a compute agent
the hosts).
"""

from __future__ import annotations

import contextlib
import json
import logging

import sqlalchemy as sa

from fleetflow.common import metrics
from fleetflow.persistence import evacuations as evacuation_rows
from fleetflow.persistence.models import Host, utcnow
from fleetflow.plugin.flow_meta import META_KEY

LOG = logging.getLogger(__name__)

def flow_kind(meta, name: str | None) -> str:
    """The registered flow's name of a flow detail (its meta's, else its name's prefix)."""
    if isinstance(meta, str):
        with contextlib.suppress(ValueError):
            meta = json.loads(meta)
    options = meta.get(META_KEY) if isinstance(meta, dict) else None
    if isinstance(options, dict) and options.get("flow_name"):
        return options["flow_name"]
    # A flow saved without fleetflow's options: its name's first word (provision-<id>).
    return (name or "unknown").split("-", 1)[0]


def _flow_rows(backend):
    from fleetflow.persistence.db import READ_ONLY
    from fleetflow.persistence.logbook.backend import LogbookBackend
    from fleetflow.persistence.logbook.models import FLOWDETAILS

    if isinstance(backend, LogbookBackend):
        fd = FLOWDETAILS.c
        with backend.engine.execution_options(**{READ_ONLY: True}).connect() as conn:
            return conn.execute(sa.select(fd.name, fd.state, fd.meta)).all()
    with contextlib.closing(backend.get_connection()) as conn:
        return [(fd.name, fd.state, fd.meta) for book in conn.get_logbooks(lazy=True)
                for fd in conn.get_flows_for_book(book.uuid, lazy=True)]


def flows_reader(backend):
    def read():
        counts: dict[tuple[str, str], int] = {}
        for name, state, meta in _flow_rows(backend):
            key = (flow_kind(meta, name), state or "PENDING")
            counts[key] = counts.get(key, 0) + 1
        yield ("fleetflow_flows", "Flows of the logbook by kind and state.", counts,
               ("kind", "state"))
    return read


def hosts_reader(database, service_down_time: float):
    def read():
        now = utcnow()
        counts: dict[tuple[str], int] = {}
        with database.read_session() as session:
            for host in session.scalars(sa.select(Host)):
                state = evacuation_rows.effective_host_state(host, service_down_time, now)
                counts[(state,)] = counts.get((state,), 0) + 1
        yield "fleetflow_hosts", "Compute hosts by effective state.", counts, ("state",)
    return read


def board_depth(board) -> dict:
    """Jobs claimed and unclaimed on ``board``, the oldest unclaimed one's age in seconds."""
    depth = getattr(board, "depth", None)
    if depth is not None:
        return depth()
    from taskflow import states as tf_states

    now = utcnow()
    claimed, waiting = 0, []
    for job in board.iterjobs(ensure_fresh=True):
        if job.state == tf_states.CLAIMED:
            claimed += 1
        else:
            waiting.append(job.created_on)
    oldest = max((now - min(w.replace(tzinfo=None) for w in waiting)).total_seconds(), 0.0) \
        if waiting else 0.0
    return {"claimed": claimed, "unclaimed": len(waiting), "oldest_unclaimed": oldest}


def board_reader(board):
    def read():
        depth = board_depth(board)
        yield ("fleetflow_jobboard_jobs", "Jobs on the board, claimed or not.",
               {(board.name, "claimed"): depth["claimed"],
                (board.name, "unclaimed"): depth["unclaimed"]}, ("board", "state"))
        yield ("fleetflow_jobboard_unclaimed_age_seconds",
               "Age of the job waiting longest for a conductor (0: none waits).",
               {(board.name,): depth["oldest_unclaimed"]}, ("board",))
    return read


def register(conf, database, backend=None, board=None) -> None:
    """Register the readers of what this process sees (a reader per kind: a second
    registration replaces the first)."""
    metrics.register_reader("hosts", hosts_reader(database,
                                                  conf.compute.service_down_time))
    if backend is not None:
        metrics.register_reader("flows", flows_reader(backend))
    if board is not None:
        metrics.register_reader("jobboard", board_reader(board))
