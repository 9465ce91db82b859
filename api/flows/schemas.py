"""Schemas of the flow routes (shapes of the views services/flows.py returns)."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.api import hosts_view
from fleetflow.api.common import LinkSchema, PaginationArgsSchema
from fleetflow.services.flows import FLOW_STATES

STATE_HELP = ("TaskFlow's flow state, or PAUSED: stopped at its first failure by "
              "on_error=pause, nothing reverted, waiting for an operator.")


class FailureSchema(ma.Schema):
    type = ma.fields.String(required=True, metadata={"description": "Exception class name."})
    message = hosts_view.FreeText(required=True, metadata={
        "description": "Place names in it read as opaque ids to callers the policy rule "
                       "servers:show_host refuses."})
    step = ma.fields.String(required=True, metadata={"description": "The atom that failed."})


class AtomSchema(ma.Schema):
    """One task or retry controller of a flow, as last checkpointed."""

    name = ma.fields.String(required=True)
    kind = ma.fields.String(required=True, metadata={"description": "task | retry"})
    state = ma.fields.String(allow_none=True)
    intention = ma.fields.String(allow_none=True,
                                 metadata={"description": "EXECUTE | REVERT | RETRY | IGNORE"})
    attempts = ma.fields.Integer(
        metadata={"description": "Retries: values tried. Tasks: 1 once started, else 0."})
    failure = ma.fields.Nested(FailureSchema, allow_none=True)
    revert_failure = ma.fields.Nested(FailureSchema, allow_none=True)


class FlowSummarySchema(ma.Schema):
    id = ma.fields.String(required=True,
                          metadata={"description": "Operation id (also the job's name)."})
    name = ma.fields.String(required=True, metadata={"description": "Registered flow name."})
    state = ma.fields.String(required=True, metadata={"description": STATE_HELP})
    owner_tenant = ma.fields.String(allow_none=True)
    on_error = ma.fields.String(metadata={"description": "revert | pause"})
    submitted_at = ma.fields.String(allow_none=True)
    paused_at = ma.fields.String(allow_none=True,
                                 metadata={"description": "Atom that paused the flow."})
    updated_at = ma.fields.String(
        allow_none=True, metadata={"description": "Last write of the flow itself (its "
                                                  "state, a pause), ISO 8601 UTC."})
    last_progress_at = ma.fields.String(
        allow_none=True, metadata={"description": "Last checkpoint of the flow or any of "
                                                  "its atoms: how long ago it last moved."})


class FlowSchema(FlowSummarySchema):
    atoms = ma.fields.List(ma.fields.Nested(AtomSchema), required=True)
    failure = ma.fields.Nested(FailureSchema, allow_none=True,
                               metadata={"description": "The first failed atom's failure."})


class FlowResponseSchema(ma.Schema):
    flow = ma.fields.Nested(FlowSchema, required=True)


class FlowListSchema(ma.Schema):
    flows = ma.fields.List(ma.fields.Nested(FlowSummarySchema), required=True)
    links = ma.fields.List(ma.fields.Nested(LinkSchema), required=True)


class FlowQueryArgsSchema(PaginationArgsSchema):
    """Filters of a flow list (sorted by id; the marker is a flow id)."""

    state = ma.fields.String(validate=ma.validate.OneOf(FLOW_STATES),
                             metadata={"description": STATE_HELP})


class AdminFlowQueryArgsSchema(FlowQueryArgsSchema):
    tenant = ma.fields.String(metadata={"description": "Only this owner tenant's flows."})


class GraphNodeSchema(ma.Schema):
    """A node of a flow's graph: an atom (task, retry) or a flow (linear, unordered,
    graph) with its children."""

    kind = ma.fields.String(required=True, metadata={
        "description": "task | retry | linear | unordered | graph"})
    name = ma.fields.String(required=True)
    state = ma.fields.String(allow_none=True, metadata={"description": "Atoms: the state."})
    intention = ma.fields.String(allow_none=True)
    attempts = ma.fields.Integer()
    updated_at = ma.fields.String(allow_none=True, metadata={
        "description": "Atoms: the last checkpoint (ISO 8601 UTC): when it started if it "
                       "runs, when it ended if it ended."})
    started_at = ma.fields.String(allow_none=True, metadata={
        "description": "Tasks: when the last execute started (ISO 8601 UTC; kept by the "
                       "fleetflow engine, null under the stock engine)."})
    ended_at = ma.fields.String(allow_none=True, metadata={
        "description": "Tasks: when the last execute ended (succeeded or failed)."})
    duration = ma.fields.Float(allow_none=True, metadata={
        "description": "Tasks: seconds from started_at to ended_at."})
    reverted_at = ma.fields.String(allow_none=True, metadata={
        "description": "Tasks: when the task was reverted."})
    failure = ma.fields.Nested(FailureSchema, allow_none=True)
    revert_failure = ma.fields.Nested(FailureSchema, allow_none=True)
    retry = ma.fields.Nested(lambda: GraphNodeSchema(), allow_none=True, metadata={
        "description": "Flows: the retry controlling the flow's atoms."})
    children = ma.fields.List(ma.fields.Nested(lambda: GraphNodeSchema()))
    edges = ma.fields.List(ma.fields.List(ma.fields.String()), metadata={
        "description": "Flows: [from, to] pairs of children's names (order, dependencies)."})
    counts = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.Integer(), metadata={
        "description": "Flows: their atoms by state (PENDING for none yet)."})


class FlowGraphSchema(FlowSummarySchema):
    fence = ma.fields.Integer(allow_none=True, metadata={
        "description": "The fencing token the flow's current owner took."})
    owner = ma.fields.String(allow_none=True, metadata={
        "description": "The conductor that last took the flow."})
    root = ma.fields.Nested(GraphNodeSchema, required=True)


class FlowGraphResponseSchema(ma.Schema):
    graph = ma.fields.Nested(FlowGraphSchema, required=True)
