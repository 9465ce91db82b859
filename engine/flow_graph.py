"""A stored flow as a graph: its structure from its factory, its states from its checkpoints.

A flow detail keeps its atoms as a flat list; how they nest (linear, unordered
and graph flows, the retry controlling each subflow) is only in the flow its
factory builds. So the flow is rebuilt from the factory details saved with it
(``flows/registry.py``, the same rebuild a conductor resuming it makes) and
walked, each atom given the state, failure and last checkpoint of its atom
detail.

A node is ``{"kind", "name", ...}``: ``kind`` is ``task`` or ``retry`` for an
atom (with ``state``, ``intention``, ``updated_at``, ``failure``, and under the
fleetflow engine ``started_at``, ``ended_at``, ``duration``, ``reverted_at``), or
``linear``, ``unordered`` or ``graph`` for a flow, with its ``children``, the
``retry`` that controls it (or None), ``edges`` between its children's names
(a graph flow's dependencies; a linear flow's order) and ``counts`` of its
atoms by state, so a client can fold a subflow of a thousand atoms into one
box and still colour it.
"""

from __future__ import annotations

import collections
import datetime as dt

from taskflow import retry as tf_retry
from taskflow.engines import helpers as tf_helpers
from taskflow.patterns import graph_flow, linear_flow, unordered_flow

from fleetflow.engine import flow_views
from fleetflow.plugin.runtime import ENDED_AT, REVERTED_AT, STARTED_AT

#: Flow pattern -> the kind a node says.
_PATTERNS = ((graph_flow.Flow, "graph"), (linear_flow.Flow, "linear"),
             (unordered_flow.Flow, "unordered"))


def _iso(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC).isoformat()
    return str(value)


def _flow_kind(flow) -> str:
    for pattern, kind in _PATTERNS:
        if isinstance(flow, pattern):
            return kind
    return "linear"


def _child_name(item) -> str:
    return item.name


class _Walker:
    def __init__(self, details: dict[str, dict], stamps: dict[str, object],
                 times: dict[str, dict] | None = None):
        self.details = details
        self.stamps = stamps
        self.times = times or {}

    def atom(self, atom) -> dict:
        view = self.details.get(atom.name) or {
            "kind": "retry" if isinstance(atom, tf_retry.Retry) else "task",
            "state": None, "intention": None, "attempts": 0,
            "failure": None, "revert_failure": None}
        node = dict(view)
        node["name"] = atom.name
        node["kind"] = "retry" if isinstance(atom, tf_retry.Retry) else "task"
        node["updated_at"] = _iso(self.stamps.get(atom.name))
        node.update(self.times.get(atom.name) or _NO_TIMES)
        return node

    def flow(self, flow) -> dict:
        children = []
        counts: collections.Counter = collections.Counter()
        for item in flow:
            if hasattr(item, "iter_links"):
                child = self.flow(item)
                counts.update(child["counts"])
            else:
                child = self.atom(item)
                counts[child["state"] or "PENDING"] += 1
            children.append(child)
        retry = self.atom(flow.retry) if flow.retry is not None else None
        if retry is not None:
            counts[retry["state"] or "PENDING"] += 1
        edges = [[_child_name(u), _child_name(v)] for u, v, _meta in flow.iter_links()]
        return {"kind": _flow_kind(flow), "name": flow.name, "retry": retry,
                "children": children, "edges": edges, "counts": dict(counts)}


def atom_stamps(backend, flow_id: str) -> dict[str, object]:
    """``{atom name: last checkpoint time}``; empty for a backend that keeps none."""
    import sqlalchemy as sa

    from fleetflow.persistence.db import READ_ONLY
    from fleetflow.persistence.logbook.backend import LogbookBackend
    from fleetflow.persistence.logbook.models import ATOMDETAILS

    if not isinstance(backend, LogbookBackend):
        return {}
    ad = ATOMDETAILS.c
    with backend.engine.execution_options(**{READ_ONLY: True}).connect() as conn:
        return dict(conn.execute(sa.select(ad.name, ad.updated_at)
                                 .where(ad.parent_uuid == flow_id)).all())


_NO_TIMES = {"started_at": None, "ended_at": None, "reverted_at": None, "duration": None}


def _epoch(value) -> str | None:
    if value is None:
        return None
    return dt.datetime.fromtimestamp(value, dt.UTC).isoformat()


def atom_times(atom_detail) -> dict:
    """When the task's last execute started and ended (and its duration, seconds), and
    when it was reverted: stamped by the fleetflow engine with those states
    (plugin/runtime.py); None under the stock engine, which keeps no times."""
    meta = atom_detail.meta or {}
    started, ended = meta.get(STARTED_AT), meta.get(ENDED_AT)
    return {"started_at": _epoch(started), "ended_at": _epoch(ended),
            "reverted_at": _epoch(meta.get(REVERTED_AT)),
            "duration": (round(ended - started, 6)
                         if started is not None and ended is not None else None)}


def graph(flow_detail, stamps: dict[str, object] | None = None) -> dict:
    """The root node of ``flow_detail``'s flow (see the module's docstring)."""
    atoms = flow_views.atoms(flow_detail)
    details = {ad.name: flow_views.atom_view(ad) for ad in atoms}
    times = {ad.name: atom_times(ad) for ad in atoms}
    flow = tf_helpers.flow_from_detail(flow_detail)
    return _Walker(details, stamps or {}, times).flow(flow)


def walk(node: dict, depth: int = 0):
    """``(depth, node)`` of every node under ``node``, a flow's retry before its children."""
    yield depth, node
    if node.get("retry") is not None:
        yield depth + 1, node["retry"]
    for child in node.get("children", ()):
        yield from walk(child, depth + 1)


def show_graph(backend, flow_id: str, tenant: str | None = None) -> dict:
    """The flow's summary, its fence and owner, and its graph (``root``)."""
    from fleetflow.engine import actions

    flow_detail, view = actions.load_visible(backend, flow_id, tenant)
    view["root"] = graph(flow_detail, atom_stamps(backend, flow_id))
    view["fence"], view["owner"] = _fence(backend, flow_id)
    return view


def _fence(backend, flow_id: str) -> tuple[int | None, str | None]:
    """The flow's fencing token and the conductor that last took it, when known."""
    from fleetflow.persistence import fences
    from fleetflow.persistence.db import READ_ONLY
    from fleetflow.persistence.logbook.backend import LogbookBackend

    if not isinstance(backend, LogbookBackend):
        return None, None
    with backend.engine.execution_options(**{READ_ONLY: True}).connect() as conn:
        return fences.current(conn, flow_id)
