"""Flows as operators and tenants see them: list, show, resume and revert.

What a flow is and how it is resumed or reverted is the engine's business
(engine/actions.py); this is the contract the routes call. ``backend`` is
TaskFlow's logbook backend, ``board`` the jobboard a resumed or reverted
flow is posted to. A ``tenant`` reads only the flows it submitted (another
one's is NotFound, so ids cannot be probed); None is an operator.
"""

from __future__ import annotations

from fleetflow.common import ids
from fleetflow.common.exceptions import InvalidInput, NotFound
from fleetflow.engine import actions, flow_graph

#: The states a list may filter on: TaskFlow's flow states and PAUSED.
FLOW_STATES = actions.FLOW_STATES


def list_page(backend, *, limit: int, marker: str | None = None, state: str | None = None,
              tenant: str | None = None, own: str | None = None) -> tuple[list[dict], bool]:
    """``(flows, more)``: one page, newest first (of ``tenant`` when given).

    The marker must be a flow the caller may see (``own``: the project whose
    flows those are, None for operators); any other is InvalidInput naming
    ``marker``.
    """
    if marker is not None:
        try:
            # Flow ids are uuids: anything else names no flow (and an empty
            # name would read a logbook directory as a flow).
            if not ids.is_uuid(marker):
                raise NotFound(marker)
            actions.show_flow(backend, marker, tenant=own)
        except NotFound:
            raise InvalidInput(f"Invalid query parameter field 'marker': no flow {marker} "
                               "to list after.", field="marker") from None
    return actions.list_flows(backend, state=state, tenant=tenant, limit=limit, marker=marker)


def show(backend, flow_id: str, tenant: str | None = None) -> dict:
    """One flow with every atom's state, intention, attempts and failure."""
    return actions.show_flow(backend, flow_id, tenant=tenant)


def resume(board, backend, flow_id: str) -> dict:
    """Resume a stopped flow from its checkpoint and post it again (Conflict once ended)."""
    return actions.resume(board, backend, flow_id)


def revert(board, backend, flow_id: str) -> dict:
    """Revert a paused, suspended or failed flow and post it again (Conflict otherwise)."""
    return actions.revert(board, backend, flow_id)


def graph(backend, flow_id: str, tenant: str | None = None) -> dict:
    """The flow's summary, fence and owner, and its graph: nested flows and atoms, each
    atom with its state, last checkpoint and failure (engine/flow_graph.py)."""
    return flow_graph.show_graph(backend, flow_id, tenant=tenant)
